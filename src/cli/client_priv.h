/* The client's insides, shared by client.c and client_ws.c only. */
#pragma once

#include <curl/curl.h>
#include <stdbool.h>

#include "client.h"

struct client {
    CURL *curl;     /* kept across calls so keep-alive connections are reused */
    char *base;     /* "http://localhost" for a socket, else the URL without a trailing '/' */
    char *socket;   /* unix socket path, or NULL for TCP */
    char *auth;     /* "Authorization: Bearer …" or NULL */
    char *endpoint; /* what messages call the daemon's address */
    long timeout_s;
    bool stall_guard; /* this transfer fails if it moves no byte for CLIENT_STALL_S */
};

/* A non-2xx answer as err (the daemon's code and detail). */
int client_status_error(const client_resp_t *resp, err_t *err);
/* Why the daemon could not be reached, from libcurl's code and text. */
int client_transport_error(const client_t *c, CURLcode rc, const char *detail, err_t *err);
