/* Background process routes (h_processes.c, h_proc_output.c), for the route table. */
#pragma once

#include <jansson.h>
#include <sys/types.h>

#include "api_internal.h"

/* POST /sandboxes/{id}/processes: start one; 201 and its record. */
int h_proc_start(api_req_t *r, err_t *err);
/* GET /sandboxes/{id}/processes: {"processes": [record...]}. */
int h_proc_list(api_req_t *r, err_t *err);
/* GET /sandboxes/{id}/processes/{pid}: its record. */
int h_proc_get(api_req_t *r, err_t *err);
/* PATCH /sandboxes/{id}/processes/{pid} {cols, rows}: resize its terminal. */
int h_proc_patch(api_req_t *r, err_t *err);
/* DELETE /sandboxes/{id}/processes/{pid}: kill its group and forget it. */
int h_proc_delete(api_req_t *r, err_t *err);
/* POST /sandboxes/{id}/processes/{pid}/stdin: the raw body to its stdin (?eof=true). */
int h_proc_stdin(api_req_t *r, err_t *err);
/* POST /sandboxes/{id}/processes/{pid}/signal {signal}. */
int h_proc_signal(api_req_t *r, err_t *err);
/* GET /sandboxes/{id}/processes/{pid}/output: from ?cursor=, JSON or (?stream=true) ndjson. */
int h_proc_output(api_req_t *r, err_t *err);

/* The {pid} of the path; ERR_INVALID "invalid_pid" unless it is a number 1-2^31-1. */
int api_proc_pid(api_req_t *r, pid_t *pid, err_t *err);
/* A signal as a number 1-64 or a name ("TERM", "SIGTERM", any case); 0 for neither. */
int api_parse_signal(json_t *v);
