/*
 * fuzz_util.h - what the fuzz tests share: a seeded generator (the seed is
 * printed and replayed with STRATA_TEST_SEED), a per-iteration arena, byte
 * mutations of a serialized message, and a structure-aware mutator that
 * walks any protobuf-c message through its descriptor.
 *
 * Everything is single-threaded and deterministic for a given seed.
 */
#ifndef STRATA_FUZZ_UTIL_H
#define STRATA_FUZZ_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* ------------------------------------------------------------ generator -- */

typedef struct fz_rng {
    uint64_t s;
} fz_rng_t;

/* Seeds a generator; streams with different `stream` values are independent. */
void fz_rng_init(fz_rng_t *r, uint64_t seed, uint64_t stream);

uint64_t fz_next(fz_rng_t *r);

/* A value in [0, n); n must be > 0. */
uint64_t fz_below(fz_rng_t *r, uint64_t n);

/* True with probability percent/100. */
int fz_chance(fz_rng_t *r, unsigned percent);

/* Fills buf with n random bytes. */
void fz_fill(fz_rng_t *r, void *buf, size_t n);

/*
 * The run's seed: STRATA_TEST_SEED (decimal or 0x hex) if set, else one taken
 * from the clock. Prints "<prog>: seed=0x... (replay: STRATA_TEST_SEED=0x...)".
 */
uint64_t fz_seed(const char *prog);

/* An unsigned environment variable, def when unset or not a number. */
uint64_t fz_env_u64(const char *name, uint64_t def);

/* Monotonic seconds. */
double fz_now(void);

/* ---------------------------------------------------------------- arena -- */

/* Zeroed memory that lives until fz_arena_reset(); aborts on exhaustion
 * (a test process). */
void *fz_alloc(size_t n);

/* Copies n bytes into the arena. */
void *fz_dup(const void *p, size_t n);

/* Frees everything fz_alloc() returned. */
void fz_arena_reset(void);

/* ------------------------------------------------------- mutation log -- */

/* What was done to the current input, printed when a check fails. */
typedef struct fz_log {
    char text[2048];
    size_t len;
} fz_log_t;

void fz_log_clear(fz_log_t *log);
void fz_logf(fz_log_t *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------ byte mutation -- */

/*
 * Applies 1-3 byte-level mutations to buf[0..len): bit flips, truncation,
 * random appends and inserts, overwrites, a length-delimited field that
 * claims more bytes than follow, a duplicated chunk, or fresh random bytes.
 * Returns the new buffer (arena memory) and sets *len_p.
 */
uint8_t *fz_mutate_bytes(fz_rng_t *r, const uint8_t *buf, size_t len, size_t *len_p, fz_log_t *log);

/* ------------------------------------------------- message mutation -- */

/*
 * Domain knowledge for the message mutator: values that are valid for one
 * field (a real namespace id, real block hashes), so that a mutation of one
 * field reaches the checks behind the others. Each hook may be NULL; a hook
 * returns 0 to let the generic mutator choose.
 */
typedef struct fz_domain {
    void *user;
    int (*u64)(void *user, fz_rng_t *r, const ProtobufCFieldDescriptor *fd, uint64_t *out);
    int (*bytes)(void *user, fz_rng_t *r, const ProtobufCFieldDescriptor *fd,
                 ProtobufCBinaryData *out);
    size_t max_bytes;   /* largest bytes field to make (oversize tests) */
    size_t max_repeat;  /* most elements of a repeated field, and of all together */
    uint32_t limits[8]; /* numbers worth trying with +-1 (limits of the peer) */
} fz_domain_t;

/*
 * Applies n_ops structure-aware mutations to m (whose memory must be arena
 * memory or the caller's; new memory comes from the arena): a field set to
 * an interesting value (0, -1, huge, out-of-range enums, the limits +-1),
 * bytes of wrong, zero or oversize lengths, strings long or empty,
 * repeated fields emptied, shrunk, grown to thousands of entries or
 * duplicated, sub-messages removed, added or mutated in turn.
 */
void fz_pb_mutate(fz_rng_t *r, ProtobufCMessage *m, const fz_domain_t *dom, unsigned n_ops,
                  fz_log_t *log);

/* Packs m into arena memory; *len_p gets the length. */
uint8_t *fz_pb_pack(const ProtobufCMessage *m, size_t *len_p);

/* Hex of the first bytes of buf, for failure reports. */
void fz_hex(const uint8_t *buf, size_t len, char *out, size_t outlen);

/* Little-endian fields as the references read and write them, on their
 * own (not the codecs under test). */
uint32_t fz_get32(const uint8_t *p);
uint64_t fz_get64(const uint8_t *p);
void fz_put32(uint8_t *p, uint32_t v);
void fz_put64(uint8_t *p, uint64_t v);

/* The head of a failure report on stderr: "FAIL: " and the message. */
void fz_fail_head(const char *fmt, va_list ap);

/* The whole report of a fuzzer of one input at a time, then exit(1): the
 * head, seed, iteration, mutations, the input's first 200 bytes as hex
 * ("  what (len bytes): ..."), and how to replay the run. */
void fz_fail_one(uint64_t seed, uint64_t iter, const fz_log_t *log, const char *what,
                 const uint8_t *buf, size_t len, const char *fmt, va_list ap)
    __attribute__((noreturn));

/* The input of a failure: its first `shown` bytes as hex ("  what (len
 * bytes): ..."), and all of it saved to path, which the report names. */
void fz_fail_input(const char *what, const uint8_t *bytes, size_t len, size_t shown,
                   const char *path);

/* Calls fail (a noreturn reporter) with the message when cond is false. */
#define FZ_CHECK_OR(fail, cond, ...) \
    do {                             \
        if (!(cond)) {               \
            fail(__VA_ARGS__);       \
        }                            \
    } while (0)

/* Prints the last `lines` lines of the file at path (a daemon's log) to
 * stderr, indented; nothing when it cannot be opened. */
void fz_file_tail(const char *path, long lines);

#endif /* STRATA_FUZZ_UTIL_H */
