/*
 * Streamed replies. A producer thread writes the body into a pipe that libmicrohttpd reads
 * as the client takes it: memory stays bounded by the pipe, a slow client slows the
 * producer, and a client that goes away makes the producer's next write fail (EPIPE).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "api_internal.h"
#include "common/log.h"
#include "common/util.h"

struct stream_job {
    api_stream_fn fn;
    void *ctx;
    struct api_stream s;
    api_t *api;
    char rid[API_RID_SIZE];
    /* An abortable stream's response reads the pipe itself (read_abortable), and the job is
     * shared with it: freed by whichever of the two lets go last. */
    atomic_int refs;
    int read_fd;
};

static void job_put(struct stream_job *job)
{
    if (atomic_fetch_sub(&job->refs, 1) == 1)
        free(job);
}

static void *stream_main(void *arg)
{
    struct stream_job *job = arg;
    log_set_request_id(job->rid);
    job->fn(&job->s, job->ctx);
    close(job->s.fd);
    if (job->s.client_fd >= 0)
        close(job->s.client_fd);
    atomic_fetch_sub(&job->api->streams, 1);
    job_put(job);
    return NULL;
}

void api_stream_abort(struct api_stream *s)
{
    atomic_store(&s->aborted, true);
}

/* An abortable stream's body: the pipe, ended as the producer says (cut short on abort). */
static ssize_t read_abortable(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct stream_job *job = cls;
    ssize_t n;
    do
        n = read(job->read_fd, buf, max);
    while (n < 0 && errno == EINTR);
    if (n > 0)
        return n;
    /* EOF: the producer closed its end, after setting aborted if it aborts. */
    return n == 0 && !atomic_load(&job->s.aborted) ? MHD_CONTENT_READER_END_OF_STREAM
                                                   : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void free_abortable(void *cls)
{
    struct stream_job *job = cls;
    close(job->read_fd);
    job_put(job);
}

bool api_stream_write(struct api_stream *s, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = write(s->fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return false; /* EPIPE: the client went away */
        }
        p += n, len -= (size_t)n;
    }
    return !atomic_load(&s->api->stopping);
}

bool api_stream_wait(struct api_stream *s, int ms)
{
    struct pollfd p = {s->fd, 0, 0}; /* POLLERR/POLLHUP arrive unasked */
    int rc = poll(&p, 1, ms);
    return !(rc > 0 && (p.revents & (POLLERR | POLLHUP))) && !atomic_load(&s->api->stopping);
}

/* libmicrohttpd pulls a sized body from the pipe through this. */
static ssize_t read_pipe(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    int fd = (int)(intptr_t)cls;
    ssize_t n;
    do
        n = read(fd, buf, max);
    while (n < 0 && errno == EINTR);
    return n > 0 ? n : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void close_pipe(void *cls)
{
    close((int)(intptr_t)cls);
}

int api_reply_stream(api_req_t *r, const char *type, api_stream_fn fn, void *ctx, err_t *err)
{
    return api_reply_stream_sized(r, 200, type, -1, fn, ctx, err);
}

int api_reply_stream_sized(api_req_t *r, unsigned status, const char *type, int64_t size,
                           api_stream_fn fn, void *ctx, err_t *err)
{
    return api_reply_stream_ex(r, status, type, size, false, fn, ctx, err);
}

int api_reply_stream_ex(api_req_t *r, unsigned status, const char *type, int64_t size,
                        bool abortable, api_stream_fn fn, void *ctx, err_t *err)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
        return err_sys(err, "pipe");
    struct stream_job *job = xcalloc(1, sizeof(*job));
    job->fn = fn;
    job->ctx = ctx;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    job->s =
        (struct api_stream){fds[1], r->api, ci ? fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 3) : -1};
    job->api = r->api;
    job->refs = abortable ? 2 : 1;
    job->read_fd = fds[0];
    memcpy(job->rid, r->rid, sizeof(job->rid));
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    atomic_fetch_add(&r->api->streams, 1);
    if (pthread_create(&t, &attr, stream_main, job) != 0) {
        atomic_fetch_sub(&r->api->streams, 1);
        pthread_attr_destroy(&attr);
        close(fds[0]), close(fds[1]);
        if (job->s.client_fd >= 0)
            close(job->s.client_fd);
        free(job);
        return err_sys(err, "start a stream");
    }
    pthread_attr_destroy(&attr);
    /* A known size goes out as Content-Length; a body that ends short fails the transfer. */
    struct MHD_Response *resp =
        abortable   ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, read_abortable,
                                                        job, free_abortable)
        : size >= 0 ? MHD_create_response_from_callback((uint64_t)size, 64 * 1024, read_pipe,
                                                        (void *)(intptr_t)fds[0], close_pipe)
                    : MHD_create_response_from_pipe(fds[0]);
    if (type) { /* NULL: the producer's caller sets its own headers */
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    }
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    if (r->resp)
        MHD_destroy_response(r->resp);
    r->resp = resp;
    r->status = status;
    return 0;
}
