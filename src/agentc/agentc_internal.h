/* Shared by the agent client's own files: decoding the agent's JSON payloads. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "agent/protocol.h"
#include "common/error.h"

/* ERR_RUNTIME "agent_protocol": the agent sent a malformed `what` frame. */
int agentc_bad_payload(err_t *err, const char *what);
/* The frame's payload as a JSON object (duplicate keys refused), or NULL. */
json_t *agentc_payload_object(const struct agent_frame *f);
/* obj[key] as an integer within [min, max] into *out; false if absent or out of range. */
bool agentc_get_int(json_t *obj, const char *key, json_int_t min, json_int_t max, json_int_t *out);
