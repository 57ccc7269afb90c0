/* stratad_arg.c - see stratad_arg.h. */
#include "stratad_arg.h"

#include <stdio.h>
#include <unistd.h>

int tm_stratad_arg(int argc, char **argv, int min_argc, const char *prog, const char *args,
                   const char **stratad)
{
    if (argc < min_argc) {
        fprintf(stderr, "usage: %s %s\n", prog != NULL ? prog : argv[0], args);
        return 2;
    }
    *stratad = argv[1];
    return 0;
}

int tm_group_unlink(void **state)
{
    unlink(*state);
    return 0;
}
