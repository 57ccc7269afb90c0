/*
 * hashtool.c - drives the C block-hash chain for the Python cross-check.
 *
 *   st_hashtool cases N SEED   prints N random cases with their chains
 *   st_hashtool chain          reads cases from stdin, prints each chain
 *   st_hashtool image W H C    reads W*H*C pixel bytes from stdin, prints
 *                              their st_hash_image()
 *
 * A case is one line:
 *   <seed hex> <block_tokens> <t0,t1,...> <items> [<h0,h1,...>]
 * items is "-" or "content_hex:start:n_tokens;..." and the chain is "-" when
 * it has no full block.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/hash.h"

#define MAX_TOKENS 4096
#define MAX_ITEMS  16

static uint64_t rng_state;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void print_chain(const st_hash_t *chain, size_t n)
{
    char hex[33];

    if (n == 0) {
        fputs("-", stdout);
    }
    for (size_t i = 0; i < n; i++) {
        st_hash_to_hex(&chain[i], hex);
        printf("%s%s", i ? "," : "", hex);
    }
}

static int run_case(const st_hash_t *seed, uint32_t bt, const uint32_t *tokens, size_t n,
                    const st_hash_item_t *items, size_t n_items)
{
    static st_hash_t chain[MAX_TOKENS];
    size_t n_blocks;
    st_status_t status;

    status = st_hash_chain(seed, tokens, n, bt, items, n_items, chain, MAX_TOKENS, &n_blocks);
    if (status != ST_OK) {
        fprintf(stderr, "st_hash_chain: %s\n", st_strerror(status));
        return 1;
    }
    print_chain(chain, n_blocks);
    putchar('\n');
    return 0;
}

static void print_case_input(const st_hash_t *seed, uint32_t bt, const uint32_t *tokens, size_t n,
                             const st_hash_item_t *items, size_t n_items)
{
    char hex[33];

    st_hash_to_hex(seed, hex);
    printf("%s %u ", hex, bt);
    if (n == 0) {
        putchar('-');
    }
    for (size_t i = 0; i < n; i++) {
        printf("%s%u", i ? "," : "", tokens[i]);
    }
    putchar(' ');
    if (n_items == 0) {
        putchar('-');
    }
    for (size_t k = 0; k < n_items; k++) {
        st_hash_to_hex(&items[k].content, hex);
        printf("%s%s:%" PRIu64 ":%" PRIu64, k ? ";" : "", hex, items[k].start, items[k].n_tokens);
    }
    putchar(' ');
}

static int cmd_cases(int n_cases, uint64_t seed)
{
    static uint32_t tokens[MAX_TOKENS];
    st_hash_item_t items[MAX_ITEMS];

    rng_state = seed ? seed : 1;
    for (int c = 0; c < n_cases; c++) {
        st_hash_t ns;
        uint32_t bt = 16u * (1 + (uint32_t)(rng() % 8));
        size_t n = rng() % (MAX_TOKENS / 4);
        size_t n_items = (c % 2) ? rng() % MAX_ITEMS : 0;
        uint64_t pos = 0;

        for (int i = 0; i < ST_HASH_BYTES; i++) {
            ns.b[i] = (uint8_t)rng();
        }
        for (size_t i = 0; i < n; i++) {
            /* Mix small ids with full 32-bit ones. */
            tokens[i] = (rng() & 1) ? (uint32_t)(rng() % 200000) : (uint32_t)rng();
        }
        for (size_t k = 0; k < n_items; k++) {
            for (int i = 0; i < ST_HASH_BYTES; i++) {
                items[k].content.b[i] = (uint8_t)rng();
            }
            pos += rng() % (n / (n_items + 1) + 2); /* sorted, ties allowed */
            items[k].start = pos;
            items[k].n_tokens = 1 + rng() % 300;
        }
        print_case_input(&ns, bt, tokens, n, items, n_items);
        if (run_case(&ns, bt, tokens, n, items, n_items) != 0) {
            return 1;
        }
    }
    return 0;
}

static int parse_case(char *line, st_hash_t *seed, uint32_t *bt, uint32_t *tokens, size_t *n,
                      st_hash_item_t *items, size_t *n_items)
{
    char *save = NULL;
    char *f_seed = strtok_r(line, " \n", &save);
    char *f_bt = strtok_r(NULL, " \n", &save);
    char *f_tok = strtok_r(NULL, " \n", &save);
    char *f_items = strtok_r(NULL, " \n", &save);
    char *p, *s2 = NULL;

    if (!f_seed || !f_bt || !f_tok || !f_items || st_hash_from_hex(f_seed, seed) != ST_OK) {
        return -1;
    }
    *bt = (uint32_t)strtoul(f_bt, NULL, 10);
    *n = 0;
    if (strcmp(f_tok, "-") != 0) {
        for (p = strtok_r(f_tok, ",", &s2); p && *n < MAX_TOKENS; p = strtok_r(NULL, ",", &s2)) {
            tokens[(*n)++] = (uint32_t)strtoul(p, NULL, 10);
        }
    }
    *n_items = 0;
    if (strcmp(f_items, "-") != 0) {
        for (p = strtok_r(f_items, ";", &s2); p && *n_items < MAX_ITEMS;
             p = strtok_r(NULL, ";", &s2)) {
            char hex[33];
            unsigned long long start, len;

            if (sscanf(p, "%32[0-9a-fA-F]:%llu:%llu", hex, &start, &len) != 3 ||
                st_hash_from_hex(hex, &items[*n_items].content) != ST_OK) {
                return -1;
            }
            items[*n_items].start = start;
            items[*n_items].n_tokens = len;
            (*n_items)++;
        }
    }
    return 0;
}

static int cmd_chain(void)
{
    static char line[1 << 20];
    static uint32_t tokens[MAX_TOKENS];
    st_hash_item_t items[MAX_ITEMS];

    while (fgets(line, sizeof(line), stdin) != NULL) {
        st_hash_t seed;
        uint32_t bt;
        size_t n, n_items;

        if (parse_case(line, &seed, &bt, tokens, &n, items, &n_items) != 0) {
            fprintf(stderr, "st_hashtool: malformed case line\n");
            return 2;
        }
        if (run_case(&seed, bt, tokens, n, items, n_items) != 0) {
            return 1;
        }
    }
    return 0;
}

static int cmd_image(uint32_t w, uint32_t h, uint32_t c)
{
    size_t n = (size_t)w * h * c;
    uint8_t *px = malloc(n ? n : 1);
    st_hash_t out;
    char hex[33];
    st_status_t status;

    if (px == NULL || fread(px, 1, n, stdin) != n) {
        fprintf(stderr, "st_hashtool: want %zu pixel bytes on stdin\n", n);
        free(px);
        return 2;
    }
    status = st_hash_image(px, w, h, c, &out);
    free(px);
    if (status != ST_OK) {
        fprintf(stderr, "st_hash_image: %s\n", st_strerror(status));
        return 1;
    }
    st_hash_to_hex(&out, hex);
    puts(hex);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "image") == 0) {
        return cmd_image((uint32_t)strtoul(argv[2], NULL, 10), (uint32_t)strtoul(argv[3], NULL, 10),
                         (uint32_t)strtoul(argv[4], NULL, 10));
    }
    if (argc == 4 && strcmp(argv[1], "cases") == 0) {
        return cmd_cases(atoi(argv[2]), strtoull(argv[3], NULL, 10));
    }
    if (argc == 2 && strcmp(argv[1], "chain") == 0) {
        return cmd_chain();
    }
    fprintf(stderr, "usage: st_hashtool cases N SEED | chain | image W H C\n");
    return 2;
}
