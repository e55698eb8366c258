/* Events of owners' sandboxes. */
#pragma once

#include <jansson.h>
#include <stdint.h>

#include "store.h"

/* Record an event (data may be NULL); its id, or -1 if it could not be stored. */
int64_t store_event_add(store_t *s, int64_t owner_id, const char *sandbox_id, const char *type,
                        json_t *data);
/*
 * The owner's events with id > after_id, oldest first, at most limit, as a new array of
 * {id, type, container_id, timestamp, data}; NULL with err on failure.
 */
json_t *store_event_list(store_t *s, int64_t owner_id, int64_t after_id, int limit, err_t *err);
/* A cursor (an event id, 0 for the start) that store_event_list continues from to list the
 * events recorded at or after the Unix time `before`. */
int64_t store_event_cursor_before(store_t *s, double before);
