/* Trees of forks and coalesce: keep the branch that worked, delete the rest of the tree. */
#include <stdio.h>
#include <string.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "runtime/runtime.h"
#include "sandbox_internal.h"

/* The topmost ancestor of r (following parent_id, through terminated ones too). */
static int find_root(sbx_mgr_t *m, const sandbox_rec_t *r, char *root, size_t size, err_t *err)
{
    snprintf(root, size, "%s", r->id);
    char parent[65];
    snprintf(parent, sizeof(parent), "%s", r->parent_id);
    for (int depth = 0; parent[0] && depth < 10000; depth++) {
        sandbox_rec_t up;
        if (store_sandbox_get(m->store, r->owner_id, parent, &up, err) < 0)
            break; /* a parent of another owner never happens; stop at what we can see */
        snprintf(root, size, "%s", up.id);
        snprintf(parent, sizeof(parent), "%s", up.parent_id);
        store_sandbox_rec_clear(&up);
    }
    return 0;
}

static json_t *node_json(const sandbox_rec_t *r)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", r->id, "name", r->name, "label", r->label,
                     "status", sandbox_status_name(r->status), "children", json_array());
}

/* ASCII art of node and its children, `tree` style; dead nodes are marked. */
static void draw(buf_t *b, json_t *node, const char *prefix, bool last, bool root)
{
    const char *status = json_string_value(json_object_get(node, "status"));
    bool dead = strcmp(status, "terminated") == 0;
    const char *label = json_string_value(json_object_get(node, "label"));
    buf_printf(b, "%s%s%.12s%s%s%s [%s]%s\n", prefix, root ? "" : (last ? "└── " : "├── "),
               json_string_value(json_object_get(node, "id")), *label ? " (" : "", label,
               *label ? ")" : "", status, dead ? " ✗" : "");
    json_t *kids = json_object_get(node, "children");
    _cleanup_free_ char *sub = xasprintf("%s%s", prefix, root ? "" : (last ? "    " : "│   "));
    for (size_t i = 0; i < json_array_size(kids); i++)
        draw(b, json_array_get(kids, i), sub, i + 1 == json_array_size(kids), false);
}

int sbx_tree(sbx_mgr_t *m, const user_t *owner, const char *key, json_t **out, err_t *err)
{
    sandbox_rec_t r;
    if (sbx_lookup(m, owner, key, &r, err) < 0)
        return -1;
    char root[65];
    find_root(m, &r, root, sizeof(root), err);
    store_sandbox_rec_clear(&r);
    sandbox_rec_t *items = NULL;
    size_t n = 0;
    if (store_sandbox_subtree(m->store, root, &items, &n, err) < 0)
        return -1;
    /* Parents come before children: link each node under its parent's JSON. */
    json_t *by_id = json_object();
    for (size_t i = 0; i < n; i++) {
        json_t *node = node_json(&items[i]);
        json_t *parent = i ? json_object_get(by_id, items[i].parent_id) : NULL;
        if (parent)
            json_array_append(json_object_get(parent, "children"), node);
        json_object_set_new(by_id, items[i].id, node);
    }
    json_t *tree = json_incref(json_object_get(by_id, root));
    json_decref(by_id);
    store_sandbox_list_free(items, n);
    buf_t art = {0};
    draw(&art, tree, "", true, true);
    *out = json_pack("{s:s, s:o}", "tree", art.data, "tree_json", tree);
    buf_free(&art);
    return 0;
}

/* True if final descends from parent (strictly). */
static bool descends(sbx_mgr_t *m, const sandbox_rec_t *final, const char *parent_id)
{
    char cur[65];
    snprintf(cur, sizeof(cur), "%s", final->parent_id);
    for (int depth = 0; cur[0] && depth < 10000; depth++) {
        if (strcmp(cur, parent_id) == 0)
            return true;
        sandbox_rec_t up;
        if (store_sandbox_get(m->store, final->owner_id, cur, &up, NULL) < 0)
            return false;
        snprintf(cur, sizeof(cur), "%s", up.parent_id);
        store_sandbox_rec_clear(&up);
    }
    return false;
}

/* Delete each victim (marked with intent coalesce); the final one stays. */
static json_t *delete_victims(sbx_mgr_t *m, int64_t owner_id, const char *const *victims, size_t n)
{
    json_t *done = json_array();
    for (size_t i = 0; i < n; i++) {
        struct sbx_change c;
        err_t e = {0};
        /* The change protocol, as a delete; the intent is already recorded for all. */
        int rc = sbx_change_begin(m, NULL, victims[i], SBX_OP_COALESCE, &c, &e);
        if (rc == 0 && (rc = sbx_teardown(m, c.id, true, &e)) == 0 &&
            (rc = store_sandbox_set_deleted(m->store, c.id, "coalesced", &e)) == 0) {
            c.intent_written = false;
            json_array_append_new(done, json_string(victims[i]));
            sbx_event(m, owner_id, victims[i], "deleted",
                      json_pack("{s:s}", "reason", "coalesced"));
        } else if (rc < 0) {
            log_warn("sandbox.coalesce_delete_failed", "sandbox=%s msg=\"%s\"", victims[i], e.msg);
        }
        if (rc >= 0)
            sbx_change_end(&c);
        sbx_live_remove(m, victims[i]);
        if (i == 0)
            sbx_fault_point("coalesce.after_first_delete");
    }
    return done;
}

int sbx_coalesce(sbx_mgr_t *m, const user_t *owner, const char *parent_key, const char *final_key,
                 json_t **out, err_t *err)
{
    sandbox_rec_t parent, final;
    if (sbx_lookup(m, owner, parent_key, &parent, err) < 0)
        return -1;
    if (sbx_lookup(m, owner, final_key, &final, err) < 0) {
        store_sandbox_rec_clear(&parent);
        return -1;
    }
    int rc = 0;
    if (!descends(m, &final, parent.id))
        rc = err_set(err, ERR_INVALID, 0, "not_a_descendant", "sandbox %s does not descend from %s",
                     final.id, parent.id);
    else if (final.status == SBX_TERMINATED)
        rc = err_set(err, ERR_CONFLICT, 0, "sandbox_terminated", "the final sandbox is deleted");
    sandbox_rec_t *items = NULL;
    size_t n = 0;
    if (rc == 0)
        rc = store_sandbox_subtree(m->store, parent.id, &items, &n, err);
    const char **victims = xcalloc(n + 1, sizeof(*victims));
    size_t nv = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (strcmp(items[i].id, final.id) != 0 && items[i].status != SBX_TERMINATED)
            victims[nv++] = items[i].id;
    /* All victims are marked at once with the new root: a crash finishes the job on start. */
    if (rc == 0)
        rc = store_sandbox_mark_coalesce(m->store, final.id, victims, nv, err);
    if (rc == 0) {
        sbx_fault_point("coalesce.after_mark");
        json_t *done = delete_victims(m, owner->id, victims, nv);
        json_t *fin = NULL;
        sbx_get(m, owner, final.id, &fin, err);
        json_object_set_new(fin, "message",
                            json_sprintf("coalesced onto %s; %zu sandboxes deleted", final.id,
                                         json_array_size(done)));
        json_object_set_new(fin, "terminated_sandboxes", done);
        *out = fin;
        sbx_event(m, owner->id, final.id, "coalesced",
                  json_pack("{s:s, s:O}", "parent_id", parent.id, "terminated_sandboxes", done));
        log_info("sandbox.coalesced", "parent=%s final=%s deleted=%zu", parent.id, final.id,
                 json_array_size(done));
    }
    free(victims);
    store_sandbox_list_free(items, n);
    store_sandbox_rec_clear(&parent);
    store_sandbox_rec_clear(&final);
    return rc;
}
