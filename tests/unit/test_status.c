/* test_status.c - st_strerror() and the gRPC status mapping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include <grpc/status.h>

#include "strata/status.h"
#include "support/unit_main.h"

static void test_every_code_has_a_name(void **state)
{
    for (int s = 0; s > ST_ERR_LAST_; s--) {
        assert_string_not_equal(st_strerror((st_status_t)s), "unknown status");
        assert_string_not_equal(st_status_name((st_status_t)s), "ST_ERR_UNKNOWN");
        assert_true(strncmp(st_status_name((st_status_t)s), "ST_", 3) == 0);
    }
    assert_string_equal(st_strerror(ST_ERR_LAST_), "unknown status");
    assert_string_equal(st_strerror((st_status_t)5), "unknown status");
}

static void test_grpc_mapping(void **state)
{
    assert_int_equal(st_status_to_grpc(ST_OK), GRPC_STATUS_OK);
    assert_int_equal(st_status_to_grpc(ST_ERR_INVALID), GRPC_STATUS_INVALID_ARGUMENT);
    assert_int_equal(st_status_to_grpc(ST_ERR_EXHAUSTED), GRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_int_equal(st_status_to_grpc(ST_ERR_NOT_FOUND), GRPC_STATUS_NOT_FOUND);
    assert_int_equal(st_status_to_grpc(ST_ERR_UNAVAILABLE), GRPC_STATUS_UNAVAILABLE);
    assert_int_equal(st_status_to_grpc(ST_ERR_CORRUPT), GRPC_STATUS_DATA_LOSS);
    assert_int_equal(st_status_to_grpc((st_status_t)-999), GRPC_STATUS_UNKNOWN);
    /* A partial write is the client's verdict; on the wire it would read as unavailable. */
    assert_int_equal(st_status_to_grpc(ST_ERR_PARTIAL), GRPC_STATUS_UNAVAILABLE);
    assert_string_equal(st_status_name(ST_ERR_PARTIAL), "ST_ERR_PARTIAL");
    /* Admission control's refusal is RESOURCE_EXHAUSTED on the wire (plus a retry hint). */
    assert_int_equal(st_status_to_grpc(ST_ERR_OVERLOADED), GRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_string_equal(st_status_name(ST_ERR_OVERLOADED), "ST_ERR_OVERLOADED");
    /* Codes that survive a round trip through gRPC unchanged. */
    static const st_status_t round[] = {ST_OK,           ST_ERR_INVALID,        ST_ERR_NOT_FOUND,
                                        ST_ERR_EXISTS,   ST_ERR_EXHAUSTED,      ST_ERR_UNAVAILABLE,
                                        ST_ERR_TIMEOUT,  ST_ERR_CORRUPT,        ST_ERR_PERMISSION,
                                        ST_ERR_BUSY,     ST_ERR_UNSUPPORTED,    ST_ERR_CANCELLED,
                                        ST_ERR_INTERNAL, ST_ERR_UNAUTHENTICATED};
    for (size_t i = 0; i < sizeof(round) / sizeof(round[0]); i++) {
        assert_int_equal(st_status_from_grpc(st_status_to_grpc(round[i])), round[i]);
    }
    assert_int_equal(st_status_from_grpc(GRPC_STATUS_UNKNOWN), ST_ERR_INTERNAL);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_every_code_has_a_name), cmocka_unit_test(test_grpc_mapping));
}
