/* Token generation, hashing and comparison; ids. */
#include "common/id.h"
#include "tap.h"

int main(void)
{
    char a[TOKEN_LEN + 1], b[TOKEN_LEN + 1];
    ok(token_generate(a) && token_generate(b), "generate two tokens");
    ok(strlen(a) == TOKEN_LEN && strncmp(a, "sbx_", 4) == 0, "token is sbx_ + 64 hex: %s", a);
    ok(token_well_formed(a, strlen(a)), "generated token is well formed");
    ok(strcmp(a, b) != 0, "two tokens differ");
    ok(!token_well_formed("sbx_123", 7), "short token is not well formed");
    char bad[TOKEN_LEN + 1];
    memcpy(bad, a, sizeof(bad));
    bad[10] = 'Z';
    ok(!token_well_formed(bad, strlen(bad)), "non-hex token is not well formed");

    char h1[TOKEN_HASH_LEN + 1], h2[TOKEN_HASH_LEN + 1];
    token_hash("abc", 3, h1);
    is_str(h1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
           "SHA-256 of 'abc' matches the standard vector");
    token_hash(a, strlen(a), h1);
    token_hash(a, strlen(a), h2);
    ok(token_equal(h1, h2), "same token hashes equal");
    token_hash(b, strlen(b), h2);
    ok(!token_equal(h1, h2), "different tokens hash differently");
    ok(!token_equal("abc", "abcd"), "different lengths are unequal");

    char id[ID_HEX_LEN + 1], u1[ULID_LEN + 1], u2[ULID_LEN + 1];
    ok(id_random_hex(id, 32) && strlen(id) == 64 && is_hex(id, 64), "random id is 64 hex");
    ok(id_ulid(u1) && id_ulid(u2) && strlen(u1) == 26, "ulid is 26 chars: %s", u1);
    ok(strcmp(u1, u2) != 0, "two ulids differ");
    int lower = 1;
    for (int i = 0; u1[i]; i++)
        if (u1[i] >= 'A' && u1[i] <= 'Z')
            lower = 0;
    ok(lower, "ulid is lowercase");
    return tap_done();
}
