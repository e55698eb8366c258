/* Logging: one line per event, key=value (text) or a JSON object per line (json). */
#pragma once

#include <stdbool.h>

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR };
enum log_format { LOG_TEXT = 0, LOG_JSON };

/* Set the format and the lowest level printed. Lines go to stderr. */
void log_init(enum log_format format, enum log_level level);
/* Parse "debug|info|warn|error"; false if unknown. */
bool log_parse_level(const char *s, enum log_level *out);
/* Parse "text|json"; false if unknown. */
bool log_parse_format(const char *s, enum log_format *out);

/* Attach a request id to every line this thread logs until cleared with NULL. */
void log_set_request_id(const char *rid);
/* The request id of this thread, or NULL. */
const char *log_request_id(void);

/*
 * Log one event. fmt expands to space-separated key=value pairs; a value that may hold
 * spaces or quotes must go through log_quote. Example:
 *   log_msg(LOG_INFO, "http.request", "method=%s status=%d", m, s);
 */
void log_msg(enum log_level level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Quote s for a key=value line ("a b" -> "\"a b\""), truncated to fit out. Returns out. */
const char *log_quote(char *out, unsigned size, const char *s);

#define log_debug(ev, ...) log_msg(LOG_DEBUG, ev, __VA_ARGS__)
#define log_info(ev, ...)  log_msg(LOG_INFO, ev, __VA_ARGS__)
#define log_warn(ev, ...)  log_msg(LOG_WARN, ev, __VA_ARGS__)
#define log_error(ev, ...) log_msg(LOG_ERROR, ev, __VA_ARGS__)
