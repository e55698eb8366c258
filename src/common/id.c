#include "id.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <string.h>

#include "util.h"

bool id_random_hex(char *out, size_t nbytes)
{
    unsigned char raw[64];
    if (nbytes > sizeof(raw) || !random_bytes(raw, nbytes))
        return false;
    hex_encode(raw, nbytes, out);
    return true;
}

bool id_ulid(char *out)
{
    static const char alphabet[] = "0123456789abcdefghjkmnpqrstvwxyz"; /* Crockford */
    unsigned long long ms = (unsigned long long)(now_unix() * 1000.0);
    unsigned char rnd[10];
    if (!random_bytes(rnd, sizeof(rnd)))
        return false;
    /* 48-bit time in 10 chars (the first takes the top 3 bits of 50). */
    for (int i = 9; i >= 0; i--) {
        out[i] = alphabet[ms & 31];
        ms >>= 5;
    }
    /* 80 random bits in 16 chars. */
    unsigned acc = 0, bits = 0, o = 10;
    for (int i = 0; i < 10; i++) {
        acc = (acc << 8) | rnd[i];
        bits += 8;
        while (bits >= 5) {
            out[o++] = alphabet[(acc >> (bits - 5)) & 31];
            bits -= 5;
        }
    }
    out[ULID_LEN] = '\0';
    return true;
}

bool token_generate(char *out)
{
    return token_generate_prefixed(out, TOKEN_PREFIX);
}

bool token_generate_prefixed(char *out, const char *prefix)
{
    memcpy(out, prefix, 4);
    return id_random_hex(out + 4, 32);
}

void token_hash(const char *token, size_t len, char *out)
{
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)token, len, md);
    hex_encode(md, sizeof(md), out);
}

bool token_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la != lb)
        return false;
    return CRYPTO_memcmp(a, b, la) == 0;
}

bool is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
    }
    return true;
}

bool token_well_formed(const char *s, size_t len)
{
    return token_well_formed_prefixed(s, len, TOKEN_PREFIX);
}

bool token_well_formed_prefixed(const char *s, size_t len, const char *prefix)
{
    return len == TOKEN_LEN && memcmp(s, prefix, 4) == 0 && is_hex(s + 4, 64);
}
