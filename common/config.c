/*
 * config.c - the declarative config table: INI file (inih), flags, --help.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CFG_MEMBER(conf, opt) ((char *)(conf) + (opt)->offset)

static void cfg_key_normalise(const char *name, char *out, size_t len)
{
    size_t i;

    for (i = 0; name[i] != '\0' && i + 1 < len; i++) {
        out[i] = name[i] == '-' ? '_' : name[i];
    }
    out[i] = '\0';
}

static void cfg_flag_name(const char *name, char *out, size_t len)
{
    size_t i;

    for (i = 0; name[i] != '\0' && i + 1 < len; i++) {
        out[i] = name[i] == '_' ? '-' : name[i];
    }
    out[i] = '\0';
}

static const cfg_option_t *cfg_find(const cfg_table_t *table, const char *name)
{
    char key[128];

    cfg_key_normalise(name, key, sizeof(key));
    for (size_t i = 0; i < table->n_options; i++) {
        if (strcmp(table->options[i].name, key) == 0) {
            return &table->options[i];
        }
    }
    return NULL;
}

/* Parses a decimal integer with an optional suffix multiplier table. */
static st_status_t cfg_parse_scaled(const char *text, const char *const *suffixes,
                                    const uint64_t *scales, uint64_t *out_p)
{
    char *end;
    unsigned long long v;
    uint64_t scale = 1;

    while (*text == ' ' || *text == '\t') {
        text++;
    }
    if (*text < '0' || *text > '9') {
        return ST_ERR_INVALID;
    }
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno != 0) {
        return ST_ERR_INVALID;
    }
    while (*end == ' ') {
        end++;
    }
    if (*end != '\0') {
        size_t i;

        for (i = 0; suffixes[i] != NULL; i++) {
            if (strcasecmp(end, suffixes[i]) == 0) {
                scale = scales[i];
                break;
            }
        }
        if (suffixes[i] == NULL) {
            return ST_ERR_INVALID;
        }
    }
    if (v != 0 && scale > UINT64_MAX / v) {
        return ST_ERR_INVALID;
    }
    *out_p = (uint64_t)v * scale;
    return ST_OK;
}

st_status_t cfg_parse_size(const char *text, uint64_t *bytes_p)
{
    static const char *const sfx[] = {"B", "K",  "KB",  "KiB", "M",  "MB",  "MiB",
                                      "G", "GB", "GiB", "T",   "TB", "TiB", NULL};
    static const uint64_t scale[] = {1,          1ull << 10, 1ull << 10, 1ull << 10, 1ull << 20,
                                     1ull << 20, 1ull << 20, 1ull << 30, 1ull << 30, 1ull << 30,
                                     1ull << 40, 1ull << 40, 1ull << 40};

    return cfg_parse_scaled(text, sfx, scale, bytes_p);
}

st_status_t cfg_parse_duration(const char *text, uint64_t *ms_p)
{
    static const char *const sfx[] = {"ms", "s", "m", "h", "d", NULL};
    static const uint64_t scale[] = {1, 1000, 60000, 3600000, 86400000};

    return cfg_parse_scaled(text, sfx, scale, ms_p);
}

static void cfg_format_size(uint64_t v, char *buf, size_t len)
{
    static const char *const sfx[] = {"T", "G", "M", "K"};
    static const int shift[] = {40, 30, 20, 10};

    for (int i = 0; i < 4; i++) {
        if (v != 0 && v % (1ull << shift[i]) == 0) {
            snprintf(buf, len, "%" PRIu64 "%s", v >> shift[i], sfx[i]);
            return;
        }
    }
    snprintf(buf, len, "%" PRIu64, v);
}

static void cfg_format_duration(uint64_t v, char *buf, size_t len)
{
    if (v != 0 && v % 86400000 == 0) {
        snprintf(buf, len, "%" PRIu64 "d", v / 86400000);
    } else if (v != 0 && v % 3600000 == 0) {
        snprintf(buf, len, "%" PRIu64 "h", v / 3600000);
    } else if (v != 0 && v % 60000 == 0) {
        snprintf(buf, len, "%" PRIu64 "m", v / 60000);
    } else if (v != 0 && v % 1000 == 0) {
        snprintf(buf, len, "%" PRIu64 "s", v / 1000);
    } else {
        snprintf(buf, len, "%" PRIu64 "ms", v);
    }
}

static void cfg_format_bound(const cfg_option_t *opt, int64_t v, char *buf, size_t len)
{
    switch (opt->type) {
    case CFG_SIZE: cfg_format_size((uint64_t)v, buf, len); break;
    case CFG_DURATION: cfg_format_duration((uint64_t)v, buf, len); break;
    default: snprintf(buf, len, "%" PRId64, v); break;
    }
}

static const char *cfg_type_name(cfg_type_t type)
{
    switch (type) {
    case CFG_BOOL: return "a boolean (true/false)";
    case CFG_INT: return "an integer";
    case CFG_SIZE: return "a size (for example 512M, 4G)";
    case CFG_DURATION: return "a duration (for example 500ms, 5s, 2m)";
    case CFG_STRING: return "a string";
    case CFG_ENUM: return "one of the listed names";
    }
    return "a value";
}

static int cfg_parse_bool(const char *text, int *out_p)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};

    for (int i = 0; i < 4; i++) {
        if (strcasecmp(text, yes[i]) == 0) {
            *out_p = 1;
            return 1;
        }
        if (strcasecmp(text, no[i]) == 0) {
            *out_p = 0;
            return 1;
        }
    }
    return 0;
}

static st_status_t cfg_apply(const cfg_option_t *opt, void *conf, const char *text,
                             const char *where, char *err, size_t errlen)
{
    char *member = CFG_MEMBER(conf, opt);
    uint64_t u = 0;
    int64_t i = 0;
    char lo[32], hi[32];

    switch (opt->type) {
    case CFG_BOOL: {
        int b;

        if (!cfg_parse_bool(text, &b)) {
            goto err_type;
        }
        *(int *)member = b;
        return ST_OK;
    }
    case CFG_STRING: {
        const char *had = *(char **)member;
        int add = (opt->flags & CFG_REPEAT) && had != NULL && had[0] != '\0';
        char *copy = add ? malloc(strlen(had) + strlen(text) + 2) : strdup(text);

        if (copy != NULL && add) {
            size_t n = strlen(had);

            memcpy(copy, had, n);
            copy[n] = '\n';
            memcpy(copy + n + 1, text, strlen(text) + 1);
        }
        if (copy == NULL) {
            snprintf(err, errlen, "%s: out of memory for '%s'", where, opt->name);
            return ST_ERR_NOMEM;
        }
        free(*(char **)member);
        *(char **)member = copy;
        return ST_OK;
    }
    case CFG_ENUM:
        for (int k = 0; opt->enum_names[k] != NULL; k++) {
            if (strcasecmp(text, opt->enum_names[k]) == 0) {
                *(int *)member = k;
                return ST_OK;
            }
        }
        {
            char names[256] = "";
            size_t off = 0;

            for (int k = 0; opt->enum_names[k] != NULL && off < sizeof(names); k++) {
                off += (size_t)snprintf(names + off, sizeof(names) - off, "%s%s", k ? ", " : "",
                                        opt->enum_names[k]);
            }
            snprintf(err, errlen, "%s: value '%s' for '%s' is not one of: %s", where, text,
                     opt->name, names);
        }
        return ST_ERR_INVALID;
    case CFG_INT: {
        char *end;

        errno = 0;
        i = strtoll(text, &end, 10);
        if (errno != 0 || end == text || *end != '\0') {
            goto err_type;
        }
        break;
    }
    case CFG_SIZE:
        if (cfg_parse_size(text, &u) != ST_OK || u > INT64_MAX) {
            goto err_type;
        }
        i = (int64_t)u;
        break;
    case CFG_DURATION:
        if (cfg_parse_duration(text, &u) != ST_OK || u > INT64_MAX) {
            goto err_type;
        }
        i = (int64_t)u;
        break;
    }

    if (i < opt->min || i > opt->max) {
        cfg_format_bound(opt, opt->min, lo, sizeof(lo));
        cfg_format_bound(opt, opt->max, hi, sizeof(hi));
        snprintf(err, errlen, "%s: %s = %s is out of range [%s, %s]", where, opt->name, text, lo,
                 hi);
        return ST_ERR_INVALID;
    }
    if (opt->type == CFG_INT) {
        *(int64_t *)member = i;
    } else {
        *(uint64_t *)member = (uint64_t)i;
    }
    return ST_OK;

err_type:
    snprintf(err, errlen, "%s: value '%s' for '%s' is not %s", where, text, opt->name,
             cfg_type_name(opt->type));
    return ST_ERR_INVALID;
}

st_status_t cfg_set(const cfg_table_t *table, void *conf, const char *name, const char *text,
                    const char *where, char *err, size_t errlen)
{
    const cfg_option_t *opt = cfg_find(table, name);

    if (opt == NULL) {
        snprintf(err, errlen, "%s: unknown key '%s' (see %s --help)", where, name, table->program);
        return ST_ERR_NOT_FOUND;
    }
    return cfg_apply(opt, conf, text, where, err, errlen);
}

st_status_t cfg_defaults(const cfg_table_t *table, void *conf)
{
    char err[256];

    for (size_t i = 0; i < table->n_options; i++) {
        const cfg_option_t *opt = &table->options[i];
        st_status_t status;

        if (opt->defval == NULL) {
            continue;
        }
        status = cfg_apply(opt, conf, opt->defval, "default", err, sizeof(err));
        if (status != ST_OK) {
            return status;
        }
    }
    return ST_OK;
}

struct cfg_ini_ctx {
    const cfg_table_t *table;
    void *conf;
    const char *path;
    FILE *file;
    int lineno; /* the line inih is parsing, counted by our reader */
    char *err;
    size_t errlen;
    st_status_t status;
};

/* Stops the parse at the line being read, with the message. */
static char *cfg_ini_refuse(struct cfg_ini_ctx *ctx, const char *what, int limit)
{
    char msg[160];

    snprintf(msg, sizeof(msg), what, limit);
    snprintf(ctx->err, ctx->errlen, "%s:%d: %s", ctx->path, ctx->lineno + 1, msg);
    ctx->status = ST_ERR_INVALID;
    return NULL;
}

/*
 * Debian's inih is built without INI_HANDLER_LINENO, so the handler gets no
 * line number: our reader counts the lines instead. It also refuses what
 * inih would misread: a NUL byte (the rest of the line would be dropped), a
 * line longer than inih's buffer (its tail would be read as a line of its
 * own, possibly another setting) and an indented line (inih appends it to
 * the value above as a continuation, so "  listen = x" under a key would
 * become part of that key's value).
 */
static char *cfg_ini_reader(char *str, int num, void *stream)
{
    struct cfg_ini_ctx *ctx = stream;
    int max = num - 2; /* room for the newline and the NUL */
    int n = 0, c;

    if (ctx->status != ST_OK) {
        return NULL; /* keep the first error */
    }
    while ((c = getc(ctx->file)) != EOF) {
        if (c == '\n') {
            str[n++] = '\n';
            break;
        }
        if (c == '\0') {
            return cfg_ini_refuse(ctx, "a NUL byte in the line (config files are text)", 0);
        }
        if (n >= max) {
            return cfg_ini_refuse(ctx, "line longer than %d bytes", max);
        }
        str[n++] = (char)c;
    }
    if (n == 0) {
        return NULL; /* end of file */
    }
    str[n] = '\0';
    if (isspace((unsigned char)str[0])) {
        const char *p = str;

        while (isspace((unsigned char)*p)) {
            p++;
        }
        if (*p != '\0' && strchr(INI_START_COMMENT_PREFIXES, *p) == NULL) {
            return cfg_ini_refuse(ctx,
                                  "the line starts with white space (continuation lines are "
                                  "not supported: start each key at the beginning of a line)",
                                  0);
        }
    }
    ctx->lineno++;
    return str;
}

static int cfg_ini_handler(void *user, const char *section, const char *name, const char *value)
{
    struct cfg_ini_ctx *ctx = user;
    int lineno = ctx->lineno;

    if (ctx->status != ST_OK) {
        return 0; /* keep the first error; this inih does not stop on it */
    }
    const cfg_option_t *opt;
    char where[512];
    char text[1024];
    size_t len;

    snprintf(where, sizeof(where), "%s:%d", ctx->path, lineno);
    if (section[0] != '\0' && strcmp(section, ctx->table->program) != 0) {
        snprintf(ctx->err, ctx->errlen,
                 "%s: unknown section '[%s]' (keys go at the top "
                 "or under [%s])",
                 where, section, ctx->table->program);
        ctx->status = ST_ERR_NOT_FOUND;
        return 0;
    }
    if (name == NULL) {
        return 1; /* a section line */
    }
    opt = cfg_find(ctx->table, name);
    if (opt == NULL) {
        snprintf(ctx->err, ctx->errlen, "%s: unknown key '%s'", where, name);
        ctx->status = ST_ERR_NOT_FOUND;
        return 0;
    }
    if (opt->flags & CFG_NOFILE) {
        snprintf(ctx->err, ctx->errlen, "%s: key '%s' is only accepted as a flag", where, name);
        ctx->status = ST_ERR_INVALID;
        return 0;
    }
    snprintf(text, sizeof(text), "%s", value);
    len = strlen(text);
    if (len >= 2 && text[0] == '"' && text[len - 1] == '"') {
        memmove(text, text + 1, len - 2);
        text[len - 2] = '\0';
    }
    ctx->status = cfg_apply(opt, ctx->conf, text, where, ctx->err, ctx->errlen);
    return ctx->status == ST_OK;
}

st_status_t cfg_load_file(const cfg_table_t *table, void *conf, const char *path, char *err,
                          size_t errlen)
{
    struct cfg_ini_ctx ctx = {table, conf, path, NULL, 0, err, errlen, ST_OK};
    int rc;

    ctx.file = fopen(path, "r");
    if (ctx.file == NULL) {
        snprintf(err, errlen, "cannot open config file '%s': %s", path, strerror(errno));
        return ST_ERR_IO;
    }
    rc = ini_parse_stream(cfg_ini_reader, &ctx, cfg_ini_handler, &ctx);
    fclose(ctx.file);
    if (ctx.status != ST_OK) {
        return ctx.status;
    }
    if (rc != 0) {
        snprintf(err, errlen, "%s:%d: syntax error (expected 'key = value' or '[section]')", path,
                 rc);
        return ST_ERR_INVALID;
    }
    return ST_OK;
}

static int cfg_is_config_flag(const char *arg)
{
    return strcmp(arg, "-c") == 0 || strcmp(arg, "--config") == 0 ||
           strncmp(arg, "--config=", 9) == 0;
}

/* Returns 1 when arg is a flag whose value is the next argument
 * ("--node-id X", "-t 4"), so that pass 1 does not read X as a flag. */
static int cfg_takes_next(const cfg_table_t *table, const char *arg)
{
    const cfg_option_t *opt = NULL;

    if (arg[0] != '-' || arg[1] == '\0') {
        return 0;
    }
    if (arg[1] != '-') {
        for (size_t k = 0; k < table->n_options && arg[2] == '\0'; k++) {
            if (table->options[k].short_flag == arg[1]) {
                opt = &table->options[k];
            }
        }
    } else if (strchr(arg + 2, '=') == NULL && strlen(arg + 2) < 128) {
        opt = cfg_find(table, arg + 2);
    }
    return opt != NULL && opt->type != CFG_BOOL;
}

st_status_t cfg_parse_args(const cfg_table_t *table, void *conf, int argc, char **argv,
                           int *n_positional_p, int *help_p, char *err, size_t errlen)
{
    int n_pos = 0;
    int flags_done = 0;
    st_status_t status;

    *help_p = 0;
    /* Pass 1: help, and the config file, which flags then override. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            break;
        }
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            *help_p = 1;
            *n_positional_p = 0;
            return ST_OK;
        }
        if (cfg_is_config_flag(argv[i])) {
            const char *path;

            if (strncmp(argv[i], "--config=", 9) == 0) {
                path = argv[i] + 9;
            } else if (i + 1 < argc) {
                path = argv[++i];
            } else {
                snprintf(err, errlen, "%s: missing file name", argv[i]);
                return ST_ERR_INVALID;
            }
            status = cfg_load_file(table, conf, path, err, errlen);
            if (status != ST_OK) {
                return status;
            }
        } else if (cfg_takes_next(table, argv[i])) {
            i++; /* a value, even "-h" or "-c", is not a flag */
        }
    }

    /* Pass 2: the flags, in order; positional arguments move to the front. */
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i];
        const cfg_option_t *opt = NULL;
        const char *value = NULL;
        char name[128];

        if (flags_done || arg[0] != '-' || arg[1] == '\0') {
            argv[1 + n_pos++] = arg;
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            flags_done = 1;
            continue;
        }
        if (cfg_is_config_flag(arg)) {
            if (strncmp(arg, "--config=", 9) != 0) {
                i++;
            }
            continue;
        }
        if (arg[1] != '-') {
            for (size_t k = 0; k < table->n_options; k++) {
                if (arg[2] == '\0' && table->options[k].short_flag == arg[1]) {
                    opt = &table->options[k];
                }
            }
            if (opt == NULL) {
                snprintf(err, errlen, "unknown flag '%s' (see %s --help)", arg, table->program);
                return ST_ERR_NOT_FOUND;
            }
        } else {
            const char *eq = strchr(arg + 2, '=');
            size_t len = eq ? (size_t)(eq - (arg + 2)) : strlen(arg + 2);

            if (len >= sizeof(name)) {
                len = sizeof(name) - 1;
            }
            memcpy(name, arg + 2, len);
            name[len] = '\0';
            value = eq ? eq + 1 : NULL;
            opt = cfg_find(table, name);
            if (opt == NULL && value == NULL && strncmp(name, "no-", 3) == 0) {
                opt = cfg_find(table, name + 3);
                if (opt != NULL && opt->type == CFG_BOOL) {
                    value = "false";
                } else {
                    opt = NULL;
                }
            }
            if (opt == NULL) {
                snprintf(err, errlen, "unknown flag '--%s' (see %s --help)", name, table->program);
                return ST_ERR_NOT_FOUND;
            }
        }
        if (value == NULL) {
            if (opt->type == CFG_BOOL) {
                value = "true";
            } else if (i + 1 < argc) {
                value = argv[++i];
            } else {
                snprintf(err, errlen, "%s: missing value", arg);
                return ST_ERR_INVALID;
            }
        }
        cfg_flag_name(opt->name, name, sizeof(name));
        {
            char where[160];

            snprintf(where, sizeof(where), "--%s", name);
            status = cfg_apply(opt, conf, value, where, err, errlen);
        }
        if (status != ST_OK) {
            return status;
        }
    }
    *n_positional_p = n_pos;
    return ST_OK;
}

void cfg_format(const cfg_option_t *opt, const void *conf, char *buf, size_t len)
{
    const char *member = (const char *)conf + opt->offset;

    if (opt->flags & CFG_SENSITIVE) {
        snprintf(buf, len, "(hidden)");
        return;
    }
    switch (opt->type) {
    case CFG_BOOL: snprintf(buf, len, "%s", *(const int *)member ? "true" : "false"); break;
    case CFG_INT: snprintf(buf, len, "%" PRId64, *(const int64_t *)member); break;
    case CFG_SIZE: cfg_format_size(*(const uint64_t *)member, buf, len); break;
    case CFG_DURATION: cfg_format_duration(*(const uint64_t *)member, buf, len); break;
    case CFG_STRING:
        snprintf(buf, len, "%s", *(char *const *)member ? *(char *const *)member : "");
        break;
    case CFG_ENUM: snprintf(buf, len, "%s", opt->enum_names[*(const int *)member]); break;
    }
}

static const char *cfg_metavar(const cfg_option_t *opt)
{
    switch (opt->type) {
    case CFG_BOOL: return "";
    case CFG_INT: return " N";
    case CFG_SIZE: return " SIZE";
    case CFG_DURATION: return " TIME";
    case CFG_STRING: return " TEXT";
    case CFG_ENUM: return " NAME";
    }
    return "";
}

static void cfg_bounds_text(const cfg_option_t *opt, char *buf, size_t len)
{
    char lo[32], hi[32];

    buf[0] = '\0';
    if (opt->type == CFG_INT || opt->type == CFG_SIZE || opt->type == CFG_DURATION) {
        cfg_format_bound(opt, opt->min, lo, sizeof(lo));
        cfg_format_bound(opt, opt->max, hi, sizeof(hi));
        snprintf(buf, len, "%s..%s", lo, hi);
    } else if (opt->type == CFG_ENUM) {
        size_t off = 0;

        for (int k = 0; opt->enum_names[k] != NULL && off < len; k++) {
            off += (size_t)snprintf(buf + off, len - off, "%s%s", k ? "|" : "", opt->enum_names[k]);
        }
    }
}

void cfg_usage(const cfg_table_t *table, FILE *out)
{
    fprintf(out,
            "Usage: %s [options]%s%s\n%s\n\nOptions (also accepted as 'key = value' "
            "lines in the file given by --config):\n",
            table->program, table->args_usage ? " " : "",
            table->args_usage ? table->args_usage : "", table->summary);
    fprintf(out, "  -c, --config FILE\n      read settings from an INI file first; flags "
                 "given on the command line win\n");
    for (size_t i = 0; i < table->n_options; i++) {
        const cfg_option_t *opt = &table->options[i];
        char flag[128], bounds[256];

        if (strcmp(opt->name, "config") == 0) {
            continue;
        }
        cfg_flag_name(opt->name, flag, sizeof(flag));
        cfg_bounds_text(opt, bounds, sizeof(bounds));
        if (opt->short_flag) {
            fprintf(out, "  -%c, --%s%s\n", opt->short_flag, flag, cfg_metavar(opt));
        } else {
            fprintf(out, "  --%s%s\n", flag, cfg_metavar(opt));
        }
        fprintf(out, "      %s", opt->help);
        if (opt->defval != NULL && opt->defval[0] != '\0' && !(opt->flags & CFG_SENSITIVE)) {
            fprintf(out, " (default %s", opt->defval);
            fprintf(out, bounds[0] ? "; %s)" : ")", bounds);
        } else if (bounds[0]) {
            fprintf(out, " (%s)", bounds);
        }
        fputc('\n', out);
    }
    fprintf(out, "  -h, --help\n      print this help and exit\n");
}

void cfg_markdown(const cfg_table_t *table, FILE *out)
{
    fprintf(out, "## %s\n\n%s\n\n", table->program, table->summary);
    fprintf(out, "| key (file) | flag | type | default | range | meaning |\n");
    fprintf(out, "| --- | --- | --- | --- | --- | --- |\n");
    for (size_t i = 0; i < table->n_options; i++) {
        const cfg_option_t *opt = &table->options[i];
        char flag[128], bounds[256];
        static const char *const types[] = {"bool", "int", "size", "duration", "string", "enum"};

        cfg_flag_name(opt->name, flag, sizeof(flag));
        cfg_bounds_text(opt, bounds, sizeof(bounds));
        fprintf(out, "| `%s` | `--%s` | %s | %s | %s | %s |\n", opt->name, flag, types[opt->type],
                opt->defval && opt->defval[0] ? opt->defval : "-", bounds[0] ? bounds : "-",
                opt->help);
    }
    fputc('\n', out);
}

void cfg_free(const cfg_table_t *table, void *conf)
{
    for (size_t i = 0; i < table->n_options; i++) {
        const cfg_option_t *opt = &table->options[i];

        if (opt->type == CFG_STRING) {
            char **member = (char **)CFG_MEMBER(conf, opt);

            free(*member);
            *member = NULL;
        }
    }
}

int cfg_main(const cfg_table_t *table, void *conf, size_t conf_size, int argc, char **argv,
             const char *markdown_env)
{
    const char *prog = table->program;
    char err[512];
    int npos = 0, help = 0, rc = -1;

    memset(conf, 0, conf_size);
    if (cfg_defaults(table, conf) != ST_OK) {
        fprintf(stderr,
                "%s: a default of the config table does not parse (a bug), or out of "
                "memory\n",
                prog);
        return 1;
    }
    if (cfg_parse_args(table, conf, argc, argv, &npos, &help, err, sizeof(err)) != ST_OK) {
        fprintf(stderr, "%s: %s\n", prog, err);
        rc = 2;
    } else if (help) {
        cfg_usage(table, stdout);
        rc = 0;
    } else if (npos > 0) {
        fprintf(stderr, "%s: unexpected argument '%s' (see %s --help)\n", prog, argv[1], prog);
        rc = 2;
    } else if (getenv(markdown_env) != NULL) {
        cfg_markdown(table, stdout);
        rc = 0;
    }
    if (rc >= 0) {
        cfg_free(table, conf);
    }
    return rc;
}
