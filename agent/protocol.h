/*
 * The agent protocol, shared by sandboxer-agent and the daemon's client (src/agentc).
 * docs/agent-protocol.md is the full description; this header is the single source of the
 * numbers and of the frame parser both sides use.
 *
 * A frame is a 4-byte big-endian payload length N, a 1-byte type, then N payload bytes.
 * N is at most AGENT_MAX_FRAME; a larger length is a protocol error (close the connection).
 *
 * The console socket of an interactive main process (--tty) uses the same frames: the agent
 * sends STDOUT (a replay of recent output first), PONG, EXIT, ERROR; a client sends STDIN,
 * RESIZE, PING, SIGNAL.
 *
 * The processes socket (procs.sock, beside the agent socket) is served by PID 1 itself: one
 * request (PS, PROC_*) per connection, its answer, then the agent closes.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define AGENT_PROTOCOL_VERSION 1
#define AGENT_HEADER_LEN       5
#define AGENT_MAX_FRAME        (1024u * 1024u) /* largest payload accepted either way */
#define AGENT_MAX_CHUNK        (64u * 1024u)   /* largest STDOUT/STDERR/STDIN/FILE_DATA sent */
#define AGENT_SOCKET_DEFAULT   "/run/sandboxer/agent.sock"
#define AGENT_CONSOLE_SOCKET   "console.sock"  /* beside the agent socket, with --tty */
#define AGENT_CONSOLE_REPLAY   (16u * 1024u)   /* output a console client gets on attaching */
#define AGENT_CONSOLE_CLIENTS  8               /* console clients at once; more get ERROR busy */
#define AGENT_PROCS_SOCKET     "procs.sock"    /* beside the agent socket: background processes */
#define AGENT_PROCS_RING       (1024u * 1024u) /* output a background process keeps, per process */
#define AGENT_PROCS_RUNNING    64 /* background processes running at once; more: too_many */
#define AGENT_PROCS_EXITED     64 /* ended ones kept (the oldest forgotten first) */
#define AGENT_PROCS_CONNS      32 /* procs.sock connections at once; more get ERROR busy */
#define AGENT_PROCS_STDIN_MAX  (256u * 1024u)  /* stdin bytes in one PROC_STDIN request */
#define AGENT_PROCS_OUTPUT_MAX (1024u * 1024u) /* output bytes in one OUTPUT answer */

/* Frame types. Client → agent use 0x01-0x7f, agent → client 0x81-0xff, except FILE_DATA and
 * FILE_END, which also carry a WRITE's data from the client. */
enum agent_frame_type {
    /* client → agent */
    AGENT_HELLO = 0x01,     /* JSON {"version": 1}; answered with AGENT_HELLO_OK */
    AGENT_PING = 0x02,      /* empty (or any bytes, echoed); answered with AGENT_PONG */
    AGENT_EXEC = 0x03,      /* JSON exec request; answered with STARTED or ERROR */
    AGENT_STDIN = 0x04,     /* bytes for the process's stdin (or the PTY) */
    AGENT_STDIN_EOF = 0x05, /* empty: close the process's stdin */
    AGENT_SIGNAL = 0x06,    /* 1 byte: a signal number for the process group */
    AGENT_RESIZE = 0x07,    /* 4 bytes: u16 cols, u16 rows, big-endian (tty execs) */
    AGENT_AUTH = 0x08,      /* empty, the first frame on every socket of an agent started
                               with --auth-stdin; answered with AUTH_OK (or the agent closes) */
    /* files requests: JSON, one per connection instead of EXEC, served as the request's user */
    AGENT_STAT = 0x10,   /* {"path"} → FILE_INFO */
    AGENT_READ = 0x11,   /* {"path", "offset"?, "length"?} → FILE_INFO, FILE_DATA..., FILE_END */
    AGENT_WRITE = 0x12,  /* {"path", "mode"?, "mkdir"?, "append"?} → OK ready; the client
                            sends FILE_DATA..., FILE_END → OK {"size"} */
    AGENT_LIST = 0x13,   /* {"path"} → DIR_ENTRIES..., FILE_END {"truncated"} */
    AGENT_DELETE = 0x14, /* {"path", "recursive"?} → OK */
    AGENT_MKDIR = 0x15,  /* {"path", "parents"?, "mode"?} → OK */
    AGENT_RENAME = 0x16, /* {"from", "to", "overwrite"?} → OK */
    AGENT_WATCH = 0x17,  /* {"path", "recursive"?} → OK once watching, then WATCH_EVENTS...
                            until the client closes (inotify; files_watch.c) */
    AGENT_XATTR_SET = 0x18, /* {"path", "attrs": {"user.…": "value"}} → OK */
    AGENT_XATTR_GET = 0x19, /* {"paths": [...], "prefix": "user.…"} → OK {"attrs": [{name:
                               value} | null, ...]}, one per path (files_xattr.c) */
    /* background processes, on procs.sock (one per connection) */
    AGENT_PS = 0x20,          /* empty → PROCESS..., then PROCESSES {"count"} */
    AGENT_PROC_START = 0x21,  /* JSON: EXEC's members + "tag", "command" → PROCESS */
    AGENT_PROC_GET = 0x22,    /* {"pid"} → PROCESS */
    AGENT_PROC_OUTPUT = 0x23, /* {"pid", "cursor", "max"?, "wait_ms"?} → OUTPUT_INFO,
                                 STDOUT/STDERR..., PROCESS */
    AGENT_PROC_STDIN = 0x24,  /* u32 pid, u8 flags (1: EOF after), bytes → PROCESS */
    AGENT_PROC_SIGNAL = 0x25, /* {"pid", "signal"} → PROCESS */
    AGENT_PROC_RESIZE = 0x26, /* {"pid", "cols", "rows"} → PROCESS */
    AGENT_PROC_DELETE = 0x27, /* {"pid"} → OK {"pid"} */
    AGENT_QUIESCE = 0x28,     /* empty, procs.sock: let go of every host socket before a
                                 checkpoint → QUIESCED, then the agent closes */

    /* agent → client */
    AGENT_HELLO_OK = 0x81, /* JSON {"version": 1, "pid": N} */
    AGENT_PONG = 0x82,     /* the PING payload, echoed */
    AGENT_STARTED = 0x83,  /* JSON {"pid": N} */
    AGENT_STDOUT = 0x84,   /* bytes (also all PTY output) */
    AGENT_STDERR = 0x85,   /* bytes */
    AGENT_EXIT = 0x86,     /* JSON {"exit_code": N, "signal": S|null, "timed_out": bool} */
    AGENT_ERROR = 0x87,    /* JSON {"code": "...", "message": "..."}; the agent then closes */
    /* answers of the files requests (FILE_DATA and FILE_END also go client → agent in WRITE) */
    AGENT_FILE_INFO = 0x90,    /* JSON file object {name, path, type, is_dir, size, mode, mtime} */
    AGENT_FILE_DATA = 0x91,    /* file bytes, <= AGENT_MAX_CHUNK from the agent */
    AGENT_FILE_END = 0x92,     /* end of READ's or WRITE's data; LIST: {"truncated": bool} */
    AGENT_DIR_ENTRIES = 0x93,  /* JSON {"entries": [file object...]} */
    AGENT_OK = 0x94,           /* JSON {"path", "size"?, "ready"?} */
    AGENT_WATCH_EVENTS = 0x95, /* {"events": [{"name", "type"}], "dropped": N} */
    /* answers on procs.sock */
    AGENT_PROCESSES = 0xa0,   /* {"count": N}: the end of PS's PROCESS frames */
    AGENT_PROCESS = 0xa1,     /* JSON process record */
    AGENT_OUTPUT_INFO = 0xa2, /* {"cursor", "dropped"}: OUTPUT's first frame */
    AGENT_QUIESCED = 0xa3,    /* {"ok": bool, "reason"?, "tcp": N}: sockets closed (ok) or
                                 kept, with why a checkpoint would fail */
    AGENT_AUTH_OK = 0x88,     /* the agent's token (the bytes it read with --auth-stdin) */
};

/* The signal that makes a quiesced agent listen on its sockets again (after a restore):
 * SIGPWR (runsc kill knows no real-time signal). Any other time it does nothing. */
#define AGENT_RESUME_SIGNAL 30
/* The agent's token: hex characters, read from stdin with --auth-stdin. */
#define AGENT_TOKEN_LEN 64

/* PROC_STDIN's flags byte. */
#define AGENT_PROC_STDIN_EOF 1u

/* The 5-byte head of a PROC_STDIN payload: the pid (big-endian) and the flags. */
static inline void agent_proc_stdin_head(uint8_t out[5], uint32_t pid, uint8_t flags)
{
    out[0] = (uint8_t)(pid >> 24);
    out[1] = (uint8_t)(pid >> 16);
    out[2] = (uint8_t)(pid >> 8);
    out[3] = (uint8_t)pid;
    out[4] = flags;
}

/* What agent_frame_parse found at the start of a buffer. */
enum agent_parse_result {
    AGENT_PARSE_INVALID = -1,   /* a length over AGENT_MAX_FRAME or type 0: close */
    AGENT_PARSE_INCOMPLETE = 0, /* need more bytes */
    AGENT_PARSE_COMPLETE = 1,   /* *frame is filled, *consumed bytes belong to it */
};

/* One frame; payload points into the parsed buffer (not NUL-terminated). */
struct agent_frame {
    uint8_t type;
    uint32_t len;
    const uint8_t *payload;
};

/* Write the 5-byte header for a payload of len bytes of type. */
static inline void agent_frame_header(uint8_t out[AGENT_HEADER_LEN], uint8_t type, uint32_t len)
{
    out[0] = (uint8_t)(len >> 24);
    out[1] = (uint8_t)(len >> 16);
    out[2] = (uint8_t)(len >> 8);
    out[3] = (uint8_t)len;
    out[4] = type;
}

/*
 * Parse one frame at the start of buf (n bytes). An oversize length is reported as soon as
 * the 4 length bytes are in, so a reader never buffers more than one maximal frame.
 */
static inline int agent_frame_parse(const uint8_t *buf, size_t n, struct agent_frame *frame,
                                    size_t *consumed)
{
    if (n < 4)
        return AGENT_PARSE_INCOMPLETE;
    uint32_t len = (uint32_t)buf[0] << 24 | (uint32_t)buf[1] << 16 | (uint32_t)buf[2] << 8 | buf[3];
    if (len > AGENT_MAX_FRAME)
        return AGENT_PARSE_INVALID;
    if (n < AGENT_HEADER_LEN)
        return AGENT_PARSE_INCOMPLETE;
    if (buf[4] == 0)
        return AGENT_PARSE_INVALID;
    if (n - AGENT_HEADER_LEN < len)
        return AGENT_PARSE_INCOMPLETE;
    frame->type = buf[4];
    frame->len = len;
    frame->payload = buf + AGENT_HEADER_LEN;
    *consumed = AGENT_HEADER_LEN + (size_t)len;
    return AGENT_PARSE_COMPLETE;
}

/* Decode a RESIZE payload; 0 on success, -1 if it is not exactly 4 bytes. */
static inline int agent_resize_decode(const struct agent_frame *f, uint16_t *cols, uint16_t *rows)
{
    if (f->len != 4)
        return -1;
    *cols = (uint16_t)(f->payload[0] << 8 | f->payload[1]);
    *rows = (uint16_t)(f->payload[2] << 8 | f->payload[3]);
    return 0;
}

/* Encode a RESIZE payload. */
static inline void agent_resize_encode(uint8_t out[4], uint16_t cols, uint16_t rows)
{
    out[0] = (uint8_t)(cols >> 8);
    out[1] = (uint8_t)cols;
    out[2] = (uint8_t)(rows >> 8);
    out[3] = (uint8_t)rows;
}
