/*
 * Templates: names new sandboxes start from. A template is an image in the store (a built-in
 * one imported from the templates dir, or one built from a Dockerfile) or one of its owner's
 * snapshots, and may keep a warm pool of started sandboxes. Global templates (owner 0: the
 * built-in ones, admins' global builds) are seen by everyone; others by their owner only, who
 * sees their own before a global one of the same name.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "sandbox.h"
#include "store/store.h"

/* The template a create without image, template or snapshot uses. */
#define SBX_DEFAULT_TEMPLATE "base"
/* Most sandboxes one template's warm pool keeps. */
#define SBX_POOL_MAX 8

/* A validated POST /templates. */
struct sbx_template_build_req {
    const char *name;
    const char *dockerfile; /* the Dockerfile's text */
    json_t *context;        /* {relative path: text | {"base64": data}} or NULL */
    int64_t pool;           /* < 0 absent */
    int setuid;             /* -1 absent: yes */
    int global;             /* 1: a global template (admins only) */
    int network;            /* 1: RUN steps share the host's network (admins only) */
    const char *snapshot;   /* instead of a Dockerfile: the owner's snapshot becomes it */
};

/* A build's progress: {"type": "log"|"step", ...}; the event is stolen. false: stop
 * reporting (the client went away; the build goes on). */
typedef bool (*sbx_build_event_fn)(void *ctx, json_t *event);

/* Decode and validate a POST /templates body (ERR_INVALID on unknown fields, bad names). */
int sbx_template_req_decode(json_t *body, struct sbx_template_build_req *q, err_t *err);
/* Build (or, with snapshot, register) owner's template; *out is its JSON. A failed build
 * leaves no template. fn may be NULL. */
int sbx_template_build(sbx_mgr_t *m, const user_t *owner, const struct sbx_template_build_req *q,
                       sbx_build_event_fn fn, void *ctx, json_t **out, err_t *err);
/* {"templates": [...]} that owner sees. */
int sbx_template_list(sbx_mgr_t *m, const user_t *owner, json_t **out, err_t *err);
/* One template as owner sees it (with its pool's state). */
int sbx_template_get(sbx_mgr_t *m, const user_t *owner, const char *name, json_t **out, err_t *err);
/* Set the warm pool size of owner's template (a global one: admins only). */
int sbx_template_set_pool(sbx_mgr_t *m, const user_t *owner, const char *name, int64_t pool,
                          json_t **out, err_t *err);
/* Delete owner's template (a global one: admins only; built-in ones: never), draining its
 * pool. */
int sbx_template_delete(sbx_mgr_t *m, const user_t *owner, const char *name, err_t *err);
/* Import the built-in templates (a thread) and start the warm pools; after sbx_reconcile. */
int sbx_templates_start(sbx_mgr_t *m, err_t *err);
