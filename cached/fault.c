/*
 * fault.c - the faults of fault.h, in STRATA_FAULT_INJECT builds only.
 */
#include "fault.h"

#ifdef STRATA_FAULT_INJECT
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static pthread_once_t cd_fault_once = PTHREAD_ONCE_INIT;
static char cd_fault_list[256];

static void cd_fault_load(void)
{
    const char *env = getenv("STRATA_FAULT");

    if (env != NULL && strlen(env) < sizeof(cd_fault_list) - 2) {
        /* ",a,b," so that a name matches as ",name," only. */
        cd_fault_list[0] = ',';
        memcpy(cd_fault_list + 1, env, strlen(env));
        cd_fault_list[strlen(env) + 1] = ',';
    }
}

int cd_fault_armed(const char *name)
{
    char want[64];

    pthread_once(&cd_fault_once, cd_fault_load);
    if (cd_fault_list[0] == '\0' || strlen(name) + 3 > sizeof(want)) {
        return 0;
    }
    want[0] = ',';
    memcpy(want + 1, name, strlen(name));
    want[strlen(name) + 1] = ',';
    want[strlen(name) + 2] = '\0';
    return strstr(cd_fault_list, want) != NULL;
}

void cd_fault_announce(void)
{
    pthread_once(&cd_fault_once, cd_fault_load);
    if (cd_fault_list[0] != '\0') {
        lg_warn("test faults armed: this node misbehaves on purpose STRATA_FAULT=%s",
                getenv("STRATA_FAULT"));
    }
}
#endif
