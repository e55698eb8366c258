/* Shared by the E2B facade's own files (src/e2b); never included outside it. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "api/api_internal.h"
#include "e2b.h"
#include "sandbox/processes.h"
#include "sandbox/sandbox.h"
#include "store/store_e2b.h"

#define E2B_ENVD_PORT     49983       /* the port E2B's SDKs reach envd on */
#define E2B_READY_WAIT_MS 60000       /* a template's server, started at create, answers */
#define E2B_ENVD_VERSION  "0.6.3"     /* the envd whose features the data plane implements */
#define E2B_MAX_TIMEOUT   86400       /* seconds a sandbox may be given at most (E2B's Pro tier) */
#define E2B_META_PREFIX   "user.e2b." /* file metadata: extended attributes under it */

/* ---- common.c: the sandbox a request names, replies, helpers ---- */

/* A sandbox of E2B's, resolved for a request. */
struct e2b_box {
    e2b_sandbox_rec_t rec; /* the row: E2B id, our id, template, metadata, env, token */
    user_t owner;
    struct sbx_life life; /* status, deadline, resources */
    bool token_ok;        /* the request carries its access token (or it has none) */
};

/* The caller's sandbox with E2B id e2b_id (control plane): ERR_NOT_FOUND for unknown, another
 * owner's, ended ones (and their row goes). */
int e2b_box_get(api_req_t *r, const char *e2b_id, struct e2b_box *b, err_t *err);
/* The sandbox of r's host (envd): its access token checked when it has one (X-Access-Token;
 * with allow_signed, a valid signature for the /files routes stands in for it). A sandbox
 * that is gone or asleep answers 502 as E2B's proxy does. */
int e2b_box_envd(api_req_t *r, struct e2b_box *b, bool allow_signed, err_t *err);
/* Release what b holds. */
void e2b_box_clear(struct e2b_box *b);
/* True if the E2B state of life is "running" / "paused" (else it is gone for E2B). */
bool e2b_state_running(const struct sbx_life *life);
bool e2b_state_paused(const struct sbx_life *life);
/* A new E2B sandbox id: 20 lowercase letters and digits. */
void e2b_new_id(char out[E2B_ID_LEN + 1]);
/* True if s has the form of E2B's sandbox ids. */
bool e2b_id_valid(const char *s);
/* Unix seconds as RFC 3339 UTC with milliseconds ("2026-12-01T10:00:00.123Z"). */
json_t *e2b_time_json(double t);
/* Reply 204 No Content. */
void e2b_reply_none(api_req_t *r);
/* A member of body that must be an object of strings (absent: NULL); ERR_INVALID else. */
int e2b_string_map(json_t *body, const char *name, json_t **out, err_t *err);

/* ---- users.c: who runs an envd request, and the paths it names ---- */

/* The user of an envd request (Basic auth "name:"), else the sandbox's default; its home. */
struct e2b_user {
    char name[64];
    char home[256];
    bool named; /* the request named the user */
};
/* Resolve r's user in box b (reading the sandbox's /etc/passwd through its agent). */
int e2b_user_of(api_req_t *r, struct e2b_box *b, const char *username, struct e2b_user *u,
                err_t *err);
/* path as envd resolves it: "~" and relative paths against the user's home; normalised into
 * out (AGENT_PATH_MAX). */
int e2b_resolve_path(const struct e2b_user *u, const char *path, char *out, err_t *err);
/* The owner and group names of uid and gid in box b ("" when unknown); cached a moment. */
void e2b_owner_names(api_req_t *r, struct e2b_box *b, int64_t uid, int64_t gid, char *owner,
                     size_t osize, char *group, size_t gsize);

/* ---- control.c, control_more.c: the control plane's handlers ---- */

int e2b_h_create(api_req_t *r, err_t *err);
int e2b_h_list_v1(api_req_t *r, err_t *err);
int e2b_h_list_v2(api_req_t *r, err_t *err);
int e2b_h_get(api_req_t *r, err_t *err);
int e2b_h_kill(api_req_t *r, err_t *err);
int e2b_h_timeout(api_req_t *r, err_t *err);
int e2b_h_refresh(api_req_t *r, err_t *err);
int e2b_h_connect(api_req_t *r, err_t *err);
int e2b_h_resume(api_req_t *r, err_t *err);
int e2b_h_pause(api_req_t *r, err_t *err);
int e2b_h_fork(api_req_t *r, err_t *err);
int e2b_h_snapshot_create(api_req_t *r, err_t *err);
int e2b_h_snapshot_list(api_req_t *r, err_t *err);
int e2b_h_snapshot_delete(api_req_t *r, err_t *err);
int e2b_h_metrics(api_req_t *r, err_t *err);
int e2b_h_metrics_many(api_req_t *r, err_t *err);
int e2b_h_api_health(api_req_t *r, err_t *err);
/* Give our new sandbox sandbox_id (the caller's) an E2B row and E2B's lifecycle: endAt in
 * timeout seconds (killed then, or hibernated with auto_pause), auto-resume or not. */
int e2b_adopt(api_req_t *r, const char *sandbox_id, const char *e2b_id, const char *template_id,
              json_t *metadata, json_t *env, bool secure, bool public_traffic, int64_t timeout,
              bool auto_pause, bool auto_resume, err_t *err);
/* The Sandbox object E2B's create and connect answer. */
json_t *e2b_sandbox_json(api_req_t *r, const struct e2b_box *b);

/* ---- envd.c: envd's own HTTP routes ---- */

int e2b_h_health(api_req_t *r, err_t *err);
int e2b_h_envs(api_req_t *r, err_t *err);
int e2b_h_envd_metrics(api_req_t *r, err_t *err);
/* files.c */
int e2b_h_files_get(api_req_t *r, err_t *err);
int e2b_h_files_post_begin(api_req_t *r, err_t *err);
int e2b_h_files_post_chunk(api_req_t *r, const char *data, size_t len, err_t *err);
int e2b_h_files_post(api_req_t *r, err_t *err);

/* ---- connect.c: Connect RPC with JSON (https://connectrpc.com/docs/protocol) ---- */

/* Connect's error code for an error kind ("not_found", "invalid_argument", ...). */
const char *e2b_rpc_code(const err_t *err);
/* The HTTP status Connect gives code. */
unsigned e2b_rpc_status(const char *code);
/* The request message of r: a unary call's JSON body, or a streaming call's one enveloped
 * message (a new reference). */
int e2b_rpc_message(api_req_t *r, json_t **out, err_t *err);
/* The same from a Content-Type and a body (the part fuzz_e2b drives). */
int e2b_rpc_parse(const char *content_type, const char *body, size_t n, json_t **out, err_t *err);
/* Reply to a unary call with the message msg (stolen). */
void e2b_rpc_reply(api_req_t *r, json_t *msg);
/* A member of a request message by its JSON name or proto name ("exitCode", "exit_code"). */
json_t *e2b_rpc_get(json_t *msg, const char *json_name, const char *proto_name);
/* The deadline a call's Connect-Timeout-Ms sets (now_mono_ms() clock; 0: none). */
double e2b_rpc_deadline(api_req_t *r);
/* The keepalive interval a stream asked for (Keepalive-Ping-Interval, seconds), in ms. */
int e2b_rpc_keepalive_ms(api_req_t *r);

/* A server stream being written by its producer thread. */
struct e2b_stream {
    struct api_stream *s;
    double last_sent; /* now_mono_ms() of the last message */
};
/* Start a server-streaming answer produced by fn(stream, ctx) on a thread of its own. */
int e2b_rpc_stream(api_req_t *r, api_stream_fn fn, void *ctx, err_t *err);
/* Send one message (consumed); false once the client is gone. */
bool e2b_rpc_send(struct e2b_stream *st, json_t *msg);
/* End the stream: success (err NULL) or the error err; the stream is then done. */
void e2b_rpc_end(struct e2b_stream *st, const err_t *err);
/* Cut the stream short (the connection drops, as when a sandbox dies under E2B's envd). */
void e2b_rpc_abort(struct e2b_stream *st);
/* E2B's v1 signature of a file URL: "v1_" + unpadded base64 of SHA-256 over
 * "path:operation:user:token[:expires]" (expires: NULL when the URL has none). 0 when sig is
 * that signature and it has not expired at now (Unix seconds), else -1 with err set. */
int e2b_signature_check(const char *path, const char *operation, const char *user,
                        const char *token, const char *expires, const char *sig, double now,
                        err_t *err);
/* The label of host just below domain (lower case, into out), or false. */
bool e2b_host_label(const char *host, const char *domain, char *out, size_t size);
/* A sandbox's host label "<port>-<id>": its port and E2B id (out: E2B_ID_LEN + 1), or false. */
bool e2b_sandbox_label(const char *label, int *port, char *id);
/* Base64 of n bytes (a JSON string, protobuf's bytes). */
json_t *e2b_base64_json(const void *p, size_t n);
/* Decode a protobuf bytes member (standard or URL-safe base64) into out. */
int e2b_base64_decode(const char *s, buf_t *out);

/* ---- process.c, filesystem.c, watch.c: the RPCs ---- */

int e2b_rpc_process_start(api_req_t *r, err_t *err);
int e2b_rpc_process_connect(api_req_t *r, err_t *err);
int e2b_rpc_process_list(api_req_t *r, err_t *err);
int e2b_rpc_process_send_input(api_req_t *r, err_t *err);
int e2b_rpc_process_send_signal(api_req_t *r, err_t *err);
int e2b_rpc_process_update(api_req_t *r, err_t *err);
int e2b_rpc_process_close_stdin(api_req_t *r, err_t *err);
int e2b_rpc_process_stream_input_begin(api_req_t *r, err_t *err);
int e2b_rpc_process_stream_input_chunk(api_req_t *r, const char *data, size_t len, err_t *err);
int e2b_rpc_process_stream_input(api_req_t *r, err_t *err);
int e2b_rpc_fs_stat(api_req_t *r, err_t *err);
int e2b_rpc_fs_make_dir(api_req_t *r, err_t *err);
int e2b_rpc_fs_move(api_req_t *r, err_t *err);
int e2b_rpc_fs_list_dir(api_req_t *r, err_t *err);
int e2b_rpc_fs_remove(api_req_t *r, err_t *err);
int e2b_rpc_fs_watch_dir(api_req_t *r, err_t *err);
int e2b_rpc_fs_create_watcher(api_req_t *r, err_t *err);
int e2b_rpc_fs_get_watcher_events(api_req_t *r, err_t *err);
int e2b_rpc_fs_remove_watcher(api_req_t *r, err_t *err);
/* The pid a message's process selector names ({"pid"} or the latest of {"tag"}). */
int e2b_process_select(api_req_t *r, struct e2b_box *b, json_t *msg, pid_t *pid, err_t *err);
/* An EntryInfo message for the file object info (agentc's) at path, with metadata (an
 * object of the user.e2b.* attributes, or NULL). */
json_t *e2b_entry_info(api_req_t *r, struct e2b_box *b, json_t *info, json_t *metadata);
/* The E2B metadata of path ({key: value}, the user.e2b. prefix taken off), or NULL. */
json_t *e2b_file_metadata(api_req_t *r, struct e2b_box *b, const struct e2b_user *u,
                          const char *path);
