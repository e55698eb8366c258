/* Identifiers: random hex ids, lowercase ULIDs, API tokens and their hashes. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define ID_HEX_LEN     64 /* sandbox ids: 256 random bits as hex */
#define ULID_LEN       26
#define TOKEN_PREFIX   "sbx_"
#define E2B_KEY_PREFIX "e2b_"   /* API keys for E2B's clients: the same length and hash */
#define TOKEN_LEN      (4 + 64) /* "sbx_" + 256 random bits as hex */
#define TOKEN_HASH_LEN 64       /* SHA-256 as hex */

/* nbytes random bytes as lowercase hex into out (2*nbytes+1). False if no randomness. */
bool id_random_hex(char *out, size_t nbytes);

/* A lowercase ULID (time-ordered, 80 random bits) into out (ULID_LEN+1). */
bool id_ulid(char *out);

/* A new API token ("sbx_" + 64 hex) into out (TOKEN_LEN+1). */
bool token_generate(char *out);
/* A new secret of prefix (4 characters: TOKEN_PREFIX, E2B_KEY_PREFIX) + 64 hex into out. */
bool token_generate_prefixed(char *out, const char *prefix);

/* SHA-256 of the token bytes as hex into out (TOKEN_HASH_LEN+1). */
void token_hash(const char *token, size_t len, char *out);

/* Constant-time comparison of two equal-length strings (different lengths: false). */
bool token_equal(const char *a, const char *b);

/* True if s looks like a token we issue (prefix, length, hex): cheap pre-check. */
bool token_well_formed(const char *s, size_t len);
/* The same check for a secret of another prefix (E2B_KEY_PREFIX). */
bool token_well_formed_prefixed(const char *s, size_t len, const char *prefix);

/* True if s is exactly n lowercase hex digits. */
bool is_hex(const char *s, size_t n);
