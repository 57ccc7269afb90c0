/* hello.c - a user program built against the installed libstrata. */
#include <stdio.h>
#include <strata/hash.h>
#include <strata/status.h>

int main(void)
{
    uint32_t tokens[128];
    st_hash_t seed = {{0}}, chain[2];
    size_t n = 0;
    char hex[33];

    for (int i = 0; i < 128; i++) {
        tokens[i] = (uint32_t)i;
    }
    if (st_hash_chain(&seed, tokens, 128, 64, NULL, 0, chain, 2, &n) != ST_OK) {
        return 1;
    }
    st_hash_to_hex(&chain[1], hex);
    printf("chain of %zu blocks, last %s\n", n, hex);
    printf("block size 7: %s\n",
           st_strerror(st_hash_chain(&seed, tokens, 128, 7, NULL, 0, chain, 2, &n)));
    return 0;
}
