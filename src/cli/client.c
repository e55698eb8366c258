/* The CLI's HTTP client: one reusable libcurl handle, buffered JSON answers, errors as err_t. */
#include "client.h"
#include "client_priv.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/jsonx.h"
#include "common/util.h"
#include "config.h"

/* A body being received: bounded so a broken server cannot make us hold unbounded memory. */
struct sink {
    buf_t *buf;
    bool too_large;
};

static bool url_scheme_ok(const char *url)
{
    return strncasecmp(url, "http://", 7) == 0 || strncasecmp(url, "https://", 8) == 0;
}

/* A token goes into a header line, so it must not hold spaces or control characters. */
static bool token_ok(const char *t)
{
    for (; *t; t++)
        if ((unsigned char)*t <= ' ' || (unsigned char)*t >= 0x7f)
            return false;
    return true;
}

static int set_endpoint(client_t *c, const struct client_config *cfg, err_t *err)
{
    if (!cfg->url) {
        const char *path = cfg->socket ? cfg->socket : CLIENT_DEFAULT_SOCKET;
        c->socket = xstrdup(path);
        c->base = xstrdup("http://localhost");
        c->endpoint = xasprintf("unix socket %s", path);
        return 0;
    }
    if (!url_scheme_ok(cfg->url))
        return err_set(
            err, ERR_INVALID, 0, "config",
            "the daemon's URL '%s' must start with http://, https:// or unix:", cfg->url);
    size_t n = strlen(cfg->url);
    while (n > 0 && cfg->url[n - 1] == '/')
        n--;
    c->base = xstrndup(cfg->url, n);
    c->endpoint = xstrdup(c->base);
    return 0;
}

client_t *client_new(const struct client_config *cfg, err_t *err)
{
    if (cfg->token && !token_ok(cfg->token)) {
        err_set(err, ERR_INVALID, 0, "config", "the token holds spaces or control characters");
        return NULL;
    }
    client_t *c = xcalloc(1, sizeof(*c));
    c->timeout_s = CLIENT_DEFAULT_TIMEOUT_S;
    if (set_endpoint(c, cfg, err) < 0) {
        client_free(c);
        return NULL;
    }
    if (cfg->token && *cfg->token)
        c->auth = xasprintf("Authorization: Bearer %s", cfg->token);
    c->curl = curl_easy_init();
    if (!c->curl) {
        client_free(c);
        err_set(err, ERR_INTERNAL, 0, "internal", "cannot initialise libcurl");
        return NULL;
    }
    return c;
}

void client_free(client_t *c)
{
    if (!c)
        return;
    if (c->curl)
        curl_easy_cleanup(c->curl);
    free(c->base);
    free(c->socket);
    /* The header holds the secret: wipe it before the memory goes back to the allocator. */
    if (c->auth)
        explicit_bzero(c->auth, strlen(c->auth));
    free(c->auth);
    free(c->endpoint);
    free(c);
}

void client_set_timeout(client_t *c, long seconds)
{
    c->timeout_s = seconds > 0 ? seconds : 0;
}

const char *client_endpoint(const client_t *c)
{
    return c->endpoint;
}

char *client_escape(const char *s)
{
    char *e = curl_easy_escape(NULL, s, (int)strlen(s));
    if (!e)
        abort(); /* libcurl only fails here when out of memory; so does xmalloc */
    char *out = xstrdup(e);
    curl_free(e);
    return out;
}

char *client_escape_path(const char *s)
{
    buf_t b = {0};
    for (;;) {
        size_t n = strcspn(s, "/");
        _cleanup_free_ char *seg = xstrndup(s, n);
        _cleanup_free_ char *esc = client_escape(seg);
        buf_puts(&b, esc);
        if (!s[n])
            break;
        buf_puts(&b, "/");
        s += n + 1;
    }
    return buf_steal(&b);
}

void client_resp_free(client_resp_t *resp)
{
    buf_free(&resp->body);
    if (resp->json)
        json_decref(resp->json);
    resp->json = NULL;
    resp->status = 0;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *userdata)
{
    struct sink *s = userdata;
    size_t n = size * nmemb;
    if (s->buf->len + n > CLIENT_MAX_BODY) {
        s->too_large = true;
        return 0; /* makes libcurl stop with CURLE_WRITE_ERROR */
    }
    buf_append(s->buf, data, n);
    return n;
}

/* The request's headers; ctype is a whole "Content-Type: …" line, or NULL without a body. */
static struct curl_slist *make_headers(const client_t *c, const char *accept, const char *ctype)
{
    struct curl_slist *h = NULL;
    h = curl_slist_append(h, accept);
    if (ctype)
        h = curl_slist_append(h, ctype);
    h = curl_slist_append(h, "Expect:"); /* no 100-continue round trip */
    if (c->auth)
        h = curl_slist_append(h, c->auth);
    return h;
}

static void set_method(CURL *curl, const char *method, const char *payload)
{
    bool post = strcmp(method, "POST") == 0;
    if (payload || post) {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, payload ? payload : "");
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)(payload ? strlen(payload) : 0));
    }
    if (!post && strcmp(method, "GET") != 0)
        curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
}

static void set_common(client_t *c, const char *url, struct curl_slist *headers,
                       curl_write_callback on_data, void *data)
{
    CURL *curl = c->curl;
    curl_easy_reset(curl);
    curl_easy_setopt(curl, CURLOPT_URL, url);
    if (c->socket)
        curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, c->socket);
    /* Only HTTP(S), and never follow a redirect: it would carry the token elsewhere. */
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
    /* Paths are built here, escaped segment by segment: send them as they are, with no
     * squashing of "." and ".." that would turn /sandboxes/.. into another route. */
    curl_easy_setopt(curl, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, (long)CLIENT_CONNECT_TIMEOUT_S);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, c->timeout_s);
    if (c->stall_guard) {
        curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, (long)CLIENT_STALL_S);
    }
    /* Without a timeout a quiet stream may last hours: notice a peer that vanished. */
    curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "sandboxer-cli/" SANDBOXER_VERSION);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, data);
}

/*
 * Send one request; the body's bytes go to on_data as they arrive. Returns libcurl's verdict,
 * with its own words in detail (CURL_ERROR_SIZE bytes).
 */
static CURLcode perform(client_t *c, const char *method, const char *path, const json_t *body,
                        const char *accept, curl_write_callback on_data, void *data, char *detail)
{
    _cleanup_free_ char *url = xasprintf("%s%s", c->base, path);
    _cleanup_free_ char *payload = body ? json_dump_compact(body) : NULL;
    struct curl_slist *headers =
        make_headers(c, accept, payload ? "Content-Type: application/json; charset=utf-8" : NULL);
    set_common(c, url, headers, on_data, data);
    set_method(c->curl, method, payload);
    curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, detail);
    CURLcode rc = curl_easy_perform(c->curl);
    curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, NULL);
    curl_slist_free_all(headers);
    return rc;
}

/* Say why the daemon could not be reached, naming its address and what to check. */
int client_transport_error(const client_t *c, CURLcode rc, const char *detail, err_t *err)
{
    if (rc == CURLE_OPERATION_TIMEDOUT)
        return err_set(err, ERR_UNAVAILABLE, 0, "timeout",
                       "the daemon at %s did not answer within %ld s", c->endpoint,
                       c->timeout_s ? c->timeout_s : (long)CLIENT_CONNECT_TIMEOUT_S);
    if (c->socket && rc == CURLE_COULDNT_CONNECT && access(c->socket, F_OK) < 0 && errno == ENOENT)
        return err_set(err, ERR_UNAVAILABLE, ENOENT, "unreachable",
                       "cannot connect to the daemon: no socket at %s (is `sandboxer serve` "
                       "running? --socket or SANDBOXER_SOCKET picks another, --url or "
                       "SANDBOXER_URL a TCP address)",
                       c->socket);
    if (c->socket && rc == CURLE_COULDNT_CONNECT && access(c->socket, W_OK) < 0 && errno == EACCES)
        return err_set(err, ERR_UNAVAILABLE, EACCES, "unreachable",
                       "cannot connect to the daemon: permission denied on %s", c->socket);
    /* libcurl's own text names "localhost port 80" for a socket, which would mislead. */
    if (c->socket || !*detail)
        detail = curl_easy_strerror(rc);
    return err_set(err, ERR_UNAVAILABLE, 0, "unreachable", "cannot connect to the daemon at %s: %s",
                   c->endpoint, detail);
}

static bool is_json_type(const char *ctype)
{
    return ctype &&
           (strncasecmp(ctype, "application/json", 16) == 0 || strstr(ctype, "+json") != NULL);
}

static void finish_resp(CURL *curl, client_resp_t *resp)
{
    char *ctype = NULL;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &resp->status);
    curl_easy_getinfo(curl, CURLINFO_CONTENT_TYPE, &ctype);
    if (!resp->body.data)
        buf_append(&resp->body, "", 0); /* so callers always have a string */
    if (is_json_type(ctype))
        resp->json = json_loadb(resp->body.data, resp->body.len, 0, NULL);
}

static int too_large(err_t *err)
{
    return err_set(err, ERR_TOO_LARGE, 0, "too_large", "the daemon's answer is larger than %u MiB",
                   CLIENT_MAX_BODY >> 20);
}

int client_request(client_t *c, const char *method, const char *path, const json_t *body,
                   client_resp_t *resp, err_t *err)
{
    char detail[CURL_ERROR_SIZE] = "";
    *resp = (client_resp_t){0};
    struct sink s = {.buf = &resp->body};
    CURLcode rc = perform(c, method, path, body, "Accept: application/json", on_body, &s, detail);
    if (rc == CURLE_OK) {
        finish_resp(c->curl, resp);
        return 0;
    }
    client_resp_free(resp);
    return s.too_large ? too_large(err) : client_transport_error(c, rc, detail, err);
}

static err_kind_t kind_of_status(long status)
{
    switch (status) {
    case 400:
        return ERR_INVALID;
    case 401:
        return ERR_UNAUTHORIZED;
    case 403:
        return ERR_FORBIDDEN;
    case 404:
        return ERR_NOT_FOUND;
    case 405:
        return ERR_NOT_ALLOWED;
    case 409:
        return ERR_CONFLICT;
    case 413:
        return ERR_TOO_LARGE;
    case 416:
        return ERR_RANGE;
    case 422:
        return ERR_UNPROCESSABLE;
    case 429:
        return ERR_LIMIT;
    case 502:
    case 503:
    case 504:
        return ERR_UNAVAILABLE;
    default:
        return status >= 500 ? ERR_INTERNAL : ERR_INVALID;
    }
}

/* The server's sentence: "detail" as text, a structured detail dumped, else the raw body. */
static char *error_detail(const client_resp_t *resp)
{
    json_t *d = json_is_object(resp->json) ? json_object_get(resp->json, "detail") : NULL;
    if (json_is_string(d))
        return xstrdup(json_string_value(d));
    if (d && !json_is_null(d))
        return json_dump_compact(d);
    size_t n = strcspn(resp->body.data, "\r\n");
    if (n == 0)
        return xstrdup(resp->status < 400 ? "an unexpected answer from the daemon"
                                          : "the daemon answered with an error");
    return xstrndup(resp->body.data, n < 200 ? n : 200);
}

int client_status_error(const client_resp_t *resp, err_t *err)
{
    _cleanup_free_ char *detail = error_detail(resp);
    json_t *code = json_is_object(resp->json) ? json_object_get(resp->json, "code") : NULL;
    return err_set(err, kind_of_status(resp->status), 0,
                   json_is_string(code) ? json_string_value(code) : NULL, "%s (HTTP %ld)", detail,
                   resp->status);
}

/* A 2xx JSON object stays in *resp; anything else becomes an error and *resp is freed. */
static int check_answer(const char *method, const char *path, client_resp_t *resp, err_t *err)
{
    int r = 0;
    if (resp->status < 200 || resp->status > 299)
        r = client_status_error(resp, err);
    else if (!json_is_object(resp->json))
        r = err_set(err, ERR_INTERNAL, 0, "bad_response",
                    "the daemon's answer to %s %s is not a JSON object (HTTP %ld)", method, path,
                    resp->status);
    if (r < 0)
        client_resp_free(resp);
    return r;
}

int client_call(client_t *c, const char *method, const char *path, const json_t *body,
                client_resp_t *resp, err_t *err)
{
    if (client_request(c, method, path, body, resp, err) < 0)
        return -1;
    return check_answer(method, path, resp, err);
}

/* --- uploads ---------------------------------------------------------------------------- */

/* A request body read from a file descriptor: exactly the size announced, in pieces. */
struct source {
    int fd;
    uint64_t left;   /* bytes still to send */
    int read_errno;  /* read(2) failed with this */
    bool short_read; /* the file ended before its announced size */
};

static size_t on_read(char *buf, size_t size, size_t nitems, void *userdata)
{
    struct source *src = userdata;
    size_t want = size * nitems;
    if (want > src->left)
        want = (size_t)src->left;
    if (want == 0)
        return 0;
    for (;;) {
        ssize_t n = read(src->fd, buf, want);
        if (n > 0) {
            src->left -= (uint64_t)n;
            return (size_t)n;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            src->read_errno = errno;
        else
            src->short_read = true;
        return CURL_READFUNC_ABORT;
    }
}

/* Why an upload got no answer: the file, a bound, a connection lost half-way, or none made. */
static int upload_error(client_t *c, CURLcode rc, const struct source *src, const struct sink *s,
                        const char *detail, err_t *err)
{
    curl_off_t sent = 0;
    if (src->read_errno)
        return err_set(err, ERR_INTERNAL, src->read_errno, "read_failed",
                       "cannot read the file being sent: %s", strerror(src->read_errno));
    if (src->short_read)
        return err_set(err, ERR_INVALID, 0, "file_changed",
                       "the file being sent became shorter while it was read");
    if (s->too_large)
        return too_large(err);
    curl_easy_getinfo(c->curl, CURLINFO_SIZE_UPLOAD_T, &sent);
    if (sent > 0 || rc == CURLE_SEND_ERROR || rc == CURLE_RECV_ERROR || rc == CURLE_GOT_NOTHING)
        return err_set(err, ERR_UNAVAILABLE, 0, "upload_broken",
                       "the upload to the daemon at %s broke off: %s", c->endpoint,
                       *detail ? detail : curl_easy_strerror(rc));
    return client_transport_error(c, rc, detail, err);
}

int client_upload(client_t *c, const char *method, const char *path, int fd, uint64_t size,
                  client_resp_t *resp, err_t *err)
{
    char detail[CURL_ERROR_SIZE] = "";
    *resp = (client_resp_t){0};
    struct sink s = {.buf = &resp->body};
    struct source src = {.fd = fd, .left = size};
    _cleanup_free_ char *url = xasprintf("%s%s", c->base, path);
    struct curl_slist *headers =
        make_headers(c, "Accept: application/json", "Content-Type: application/octet-stream");
    c->stall_guard = true;
    set_common(c, url, headers, on_body, &s);
    c->stall_guard = false;
    curl_easy_setopt(c->curl, CURLOPT_UPLOAD, 1L); /* a PUT unless told otherwise */
    if (strcmp(method, "PUT") != 0)
        curl_easy_setopt(c->curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c->curl, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(c->curl, CURLOPT_READDATA, &src);
    curl_easy_setopt(c->curl, CURLOPT_INFILESIZE_LARGE, (curl_off_t)size);
    curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, detail);
    CURLcode rc = curl_easy_perform(c->curl);
    curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, NULL);
    curl_slist_free_all(headers);
    if (rc != CURLE_OK) {
        int r = upload_error(c, rc, &src, &s, detail, err);
        client_resp_free(resp);
        return r;
    }
    finish_resp(c->curl, resp);
    return check_answer(method, path, resp, err);
}

/* --- streamed answers ------------------------------------------------------------------- */

/* A streamed answer being received. */
struct stream {
    client_t *c;
    const struct client_stream_cb *cb;
    err_t *err;
    bool any_type; /* a 2xx answer is the stream whatever its type (a file's bytes) */
    enum { UNDECIDED, STREAMING, BUFFERING } mode;
    buf_t pending; /* lines: the unfinished last line; BUFFERING: the whole (error) body */
    bool failed;   /* a callback or a bound stopped the transfer; err is set */
};

/* A 2xx answer that is not JSON (or any 2xx answer, for a download) is the stream; anything
 * else (a refusal) is buffered. */
static void decide(struct stream *st)
{
    long status = 0;
    char *ctype = NULL;
    curl_easy_getinfo(st->c->curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(st->c->curl, CURLINFO_CONTENT_TYPE, &ctype);
    bool ok = status >= 200 && status <= 299 && (st->any_type || !is_json_type(ctype));
    st->mode = ok ? STREAMING : BUFFERING;
}

/* Hand one line (its '\n' or the end of the body at p[len]) to the callback as a C string. */
static int deliver_line(struct stream *st, char *p, size_t len)
{
    if (len > 0 && p[len - 1] == '\r')
        len--;
    if (len == 0)
        return 0; /* blank lines carry nothing */
    p[len] = '\0';
    return st->cb->on_line(st->cb->data, p, len, st->err);
}

/* Deliver each complete line in pending and keep the unfinished rest, within its bound. */
static int deliver_lines(struct stream *st)
{
    buf_t *b = &st->pending;
    size_t start = 0;
    char *nl;
    while ((nl = memchr(b->data + start, '\n', b->len - start))) {
        size_t len = (size_t)(nl - (b->data + start));
        if (deliver_line(st, b->data + start, len) < 0)
            return -1;
        start += len + 1;
    }
    memmove(b->data, b->data + start, b->len - start);
    b->len -= start;
    b->data[b->len] = '\0';
    if (b->len > CLIENT_MAX_LINE)
        return err_set(st->err, ERR_TOO_LARGE, 0, "too_large",
                       "a line of the daemon's stream is longer than %u MiB",
                       CLIENT_MAX_LINE >> 20);
    return 0;
}

static int stream_bytes(struct stream *st, char *data, size_t n)
{
    if (st->mode == UNDECIDED)
        decide(st);
    if (st->mode == BUFFERING) {
        if (st->pending.len + n > CLIENT_MAX_BODY)
            return too_large(st->err);
        buf_append(&st->pending, data, n);
        return 0;
    }
    if (!st->cb->on_line)
        return st->cb->on_raw(st->cb->data, data, n, st->err);
    buf_append(&st->pending, data, n);
    return deliver_lines(st);
}

static size_t on_stream(char *data, size_t size, size_t nmemb, void *userdata)
{
    struct stream *st = userdata;
    size_t n = size * nmemb;
    if (stream_bytes(st, data, n) < 0) {
        st->failed = true;
        return 0; /* makes libcurl stop with CURLE_WRITE_ERROR */
    }
    return n;
}

/* The answer was not a stream: the server's error, or JSON where a stream was asked for. */
static int not_a_stream(struct stream *st)
{
    _cleanup_resp_ client_resp_t resp = {.body = st->pending};
    st->pending = (buf_t){0};
    finish_resp(st->c->curl, &resp);
    if (resp.status < 200 || resp.status > 299)
        return client_status_error(&resp, st->err);
    return err_set(st->err, ERR_INTERNAL, 0, "bad_response",
                   "the daemon sent JSON where a stream was asked for (HTTP %ld)", resp.status);
}

static int stream_end(struct stream *st, CURLcode rc, const char *detail)
{
    if (st->failed)
        return -1;
    if (rc != CURLE_OK && st->mode == STREAMING)
        return err_set(st->err, ERR_UNAVAILABLE, 0, "stream_broken",
                       "the daemon's stream broke off: %s",
                       *detail ? detail : curl_easy_strerror(rc));
    if (rc != CURLE_OK)
        return client_transport_error(st->c, rc, detail, st->err);
    if (st->mode == UNDECIDED)
        decide(st); /* an empty body */
    if (st->mode == BUFFERING)
        return not_a_stream(st);
    if (st->cb->on_line && st->pending.len > 0) /* a last line without its newline */
        return deliver_line(st, st->pending.data, st->pending.len);
    return 0;
}

int client_stream(client_t *c, const char *method, const char *path, const json_t *body,
                  const struct client_stream_cb *cb, err_t *err)
{
    char detail[CURL_ERROR_SIZE] = "";
    struct stream st = {.c = c, .cb = cb, .err = err};
    const char *accept = cb->on_line ? "Accept: application/x-ndjson, application/json"
                                     : "Accept: text/plain, application/json";
    CURLcode rc = perform(c, method, path, body, accept, on_stream, &st, detail);
    int r = stream_end(&st, rc, detail);
    buf_free(&st.pending);
    return r;
}

int client_download(client_t *c, const char *path, const struct client_stream_cb *cb, err_t *err)
{
    char detail[CURL_ERROR_SIZE] = "";
    struct stream st = {.c = c, .cb = cb, .err = err, .any_type = true};
    c->stall_guard = true;
    CURLcode rc = perform(c, "GET", path, NULL, "Accept: */*", on_stream, &st, detail);
    c->stall_guard = false;
    int r = stream_end(&st, rc, detail);
    buf_free(&st.pending);
    return r;
}
