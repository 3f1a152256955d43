/* pyggml/options.h — one parser for device options (plugin.h's device_set_option), for plugin
 * authors. Header-only (static inline): a plugin that uses it exports nothing and links nothing.
 *
 * A plugin describes its options once, as a table of pyg_option_def, over a settings struct of its
 * own whose option fields are int64_t; device_set_option hands key and value to pyg_option_set and
 * turns a non-OK status into its error object with the message pyg_option_set wrote. The `doc`
 * strings are the plugin's own record of each option; its README lists the same.
 *
 *     typedef struct { int64_t graphs, chunk_mb; } my_settings;
 *     static const pyg_option_def my_options[] = {
 *         PYG_OPTION_BOOL(my_settings, graphs, "capture plans into device graphs"),
 *         PYG_OPTION_INT(my_settings, chunk_mb, 1, 4096, "converted weights per chunk, MiB"),
 *     };
 *     int32_t st = pyg_option_set(my_options, PYG_OPTION_COUNT(my_options), &dev->settings,
 *                                 key, value, msg, sizeof msg);
 *
 * Values: booleans take 1/0, on/off, true/false, yes/no; integers take decimal digits within
 * [min, max]; choices take one of the listed words (the field gets its index). Keys are
 * [a-z0-9_]+. Unknown key: PYG_ERR_UNSUPPORTED (the message lists the known keys); a value that does
 * not parse or lies outside the range: PYG_ERR_INVALID_ARGUMENT, and the field keeps its value.
 */
#ifndef PYGGML_OPTIONS_H
#define PYGGML_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "pyggml/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PYG_OPTION_KIND_BOOL 0
#define PYG_OPTION_KIND_INT 1
#define PYG_OPTION_KIND_CHOICE 2

typedef struct pyg_option_def {
    const char *key;             /* [a-z0-9_]+, static */
    int32_t kind;                /* PYG_OPTION_KIND_* */
    int32_t reserved0;
    size_t offset;               /* offset of the int64_t field in the settings struct */
    int64_t min, max;            /* KIND_INT: accepted range, inclusive */
    const char *const *choices;  /* KIND_CHOICE: NULL-terminated words, static; the field gets the index */
    const char *doc;             /* one line: what it changes, its default; static */
} pyg_option_def;

#define PYG_OPTION_BOOL(T, field, doc) { #field, PYG_OPTION_KIND_BOOL, 0, offsetof(T, field), 0, 1, NULL, doc }
#define PYG_OPTION_INT(T, field, lo, hi, doc) { #field, PYG_OPTION_KIND_INT, 0, offsetof(T, field), lo, hi, NULL, doc }
#define PYG_OPTION_CHOICE(T, field, words, doc) \
    { #field, PYG_OPTION_KIND_CHOICE, 0, offsetof(T, field), 0, 0, words, doc }
#define PYG_OPTION_COUNT(table) ((int)(sizeof(table) / sizeof((table)[0])))

/* "on"/"off" words and their value; -1 when `s` is neither. */
static inline int pyg_option_parse_bool(const char *s) {
    static const char *const on[] = { "1", "on", "true", "yes" }, *const off[] = { "0", "off", "false", "no" };
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, on[i]) == 0) return 1;
        if (strcmp(s, off[i]) == 0) return 0;
    }
    return -1;
}

/* Decimal integer (optional '-') that fits int64_t; 0 on success. */
static inline int pyg_option_parse_int(const char *s, int64_t *out) {
    const char *p = s;
    int neg = *p == '-';
    if (neg) p++;
    if (!*p) return -1;
    uint64_t v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        if (v > (UINT64_MAX - 9) / 10) return -1;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v > (uint64_t)INT64_MAX) return -1;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

/* Set the field `key` names in `settings` from `value`. PYG_OK, PYG_ERR_UNSUPPORTED (no such key)
 * or PYG_ERR_INVALID_ARGUMENT (NULL argument, bad value); `msg` gets the reason when not OK. */
static inline int32_t pyg_option_set(const pyg_option_def *defs, int n, void *settings, const char *key,
                                     const char *value, char *msg, size_t msglen) {
    if (!key || !value || !settings) {
        snprintf(msg, msglen, "device_set_option: NULL key, value or device");
        return PYG_ERR_INVALID_ARGUMENT;
    }
    for (int i = 0; i < n; i++) {
        const pyg_option_def *d = &defs[i];
        if (strcmp(d->key, key) != 0) continue;
        int64_t *field = (int64_t *)((char *)settings + d->offset);
        int64_t v = 0;
        if (d->kind == PYG_OPTION_KIND_BOOL) {
            const int b = pyg_option_parse_bool(value);
            if (b < 0) {
                snprintf(msg, msglen, "option %s wants 1/0, on/off, true/false or yes/no, got '%.64s'", key, value);
                return PYG_ERR_INVALID_ARGUMENT;
            }
            v = b;
        } else if (d->kind == PYG_OPTION_KIND_INT) {
            if (pyg_option_parse_int(value, &v) != 0 || v < d->min || v > d->max) {
                snprintf(msg, msglen, "option %s wants an integer in %lld..%lld, got '%.64s'", key,
                         (long long)d->min, (long long)d->max, value);
                return PYG_ERR_INVALID_ARGUMENT;
            }
        } else {
            int c = 0;
            while (d->choices[c] && strcmp(d->choices[c], value) != 0) c++;
            if (!d->choices[c]) {
                char words[1024] = "";   /* every choice: a cut list would hide valid values */
                size_t len = 0;
                for (int k = 0; d->choices[k] && len + 1 < sizeof words; k++) {
                    int w = snprintf(words + len, sizeof words - len, "%s%s", k ? ", " : "", d->choices[k]);
                    if (w < 0) break;
                    len += (size_t)w;
                }
                snprintf(msg, msglen, "option %s wants one of %s, got '%.64s'", key, words, value);
                return PYG_ERR_INVALID_ARGUMENT;
            }
            v = c;
        }
        *field = v;
        return PYG_OK;
    }
    char keys[2048] = "";
    size_t len = 0;
    for (int i = 0; i < n && len + 1 < sizeof keys; i++) {
        int w = snprintf(keys + len, sizeof keys - len, "%s%s", i ? ", " : "", defs[i].key);
        if (w < 0) break;
        len += (size_t)w;
    }
    snprintf(msg, msglen, "unknown option '%.64s' (known: %s)", key, keys);
    return PYG_ERR_UNSUPPORTED;
}

#ifdef __cplusplus
}
#endif
#endif /* PYGGML_OPTIONS_H */
