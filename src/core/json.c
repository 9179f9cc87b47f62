#include "json.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

#define MAX_DEPTH 32

typedef struct parser {
    mw_json *j;
    const char *s, *what;
    size_t len, pos, max_bytes;
    int depth;
} parser;

static mw_status err(parser *p, const char *why) {
    return mw_fail(MW_ERR_FORMAT, "%s: %s at byte %zu", p->what, why, p->pos);
}

static void ws(parser *p) {
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
                               p->s[p->pos] == '\r'))
        p->pos++;
}

static mw_status too_big(parser *p) {
    return mw_fail(MW_ERR_FORMAT, "%s: parsing it would take more than %zu MiB of memory (the limit for this file)",
                   p->what, p->max_bytes >> 20);
}

/* Grows j->nodes or j->strings so that the parse holds at most p->max_bytes in all. */
static mw_status new_node(parser *p, mw_json_type t, int *id) {
    mw_json *j = p->j;
    if (j->n == j->cap) {
        size_t room = p->max_bytes > j->scap ? (p->max_bytes - j->scap) / sizeof(mw_json_node) : 0;
        size_t cap = j->cap ? 2 * (size_t)j->cap : 64;
        if (cap > room) cap = room;
        if (cap > INT_MAX) cap = INT_MAX;
        if (cap <= (size_t)j->n) return too_big(p);
        mw_json_node *nn = realloc(j->nodes, sizeof *nn * cap);
        if (!nn) return mw_fail(MW_ERR_NOMEM, "%s: out of memory", p->what);
        j->nodes = nn;
        j->cap = (int)cap;
        j->bytes = sizeof *nn * cap + j->scap;
    }
    mw_json_node *n = &j->nodes[j->n];
    memset(n, 0, sizeof *n);
    n->type = t;
    n->first = n->next = -1;
    *id = j->n++;
    return MW_OK;
}

static mw_status grow_strings(parser *p, size_t need) {
    mw_json *j = p->j;
    if (need <= j->scap) return MW_OK;
    size_t nodes = sizeof(mw_json_node) * (size_t)j->cap;
    size_t room = p->max_bytes > nodes ? p->max_bytes - nodes : 0;
    size_t cap = j->scap ? 2 * j->scap : 1024;
    while (cap < need) cap *= 2;
    if (cap > room) cap = room;
    if (cap < need) return too_big(p);
    char *ns = realloc(j->strings, cap);
    if (!ns) return mw_fail(MW_ERR_NOMEM, "%s: out of memory", p->what);
    j->strings = ns;
    j->scap = cap;
    j->bytes = nodes + cap;
    return MW_OK;
}

/* Decodes a string at p->pos (on the opening quote) into j->strings; *off gets its offset. */
static mw_status string(parser *p, size_t *off) {
    mw_json *j = p->j;
    p->pos++;
    size_t start = j->slen;
    for (;;) {
        if (p->pos >= p->len) return err(p, "unterminated string");
        unsigned char c = (unsigned char)p->s[p->pos++];
        char out[4];
        int n = 1;
        if (c == '"') break;
        if (c < 0x20) return err(p, "control character in string");
        if (c == '\\') {
            if (p->pos >= p->len) return err(p, "unterminated escape");
            char e = p->s[p->pos++];
            const char *map = strchr("\"\"\\\\//b\bf\fn\nr\rt\t", e);
            if (e == 'u') {
                if (p->len - p->pos < 4) return err(p, "short \\u escape");
                unsigned v = 0;
                for (int k = 0; k < 4; k++) {
                    char h = p->s[p->pos++];
                    int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                    if (d < 0) return err(p, "bad \\u escape");
                    v = v * 16 + (unsigned)d;
                }
                if (v >= 0xD800 && v <= 0xDFFF) return err(p, "surrogate \\u escapes are not supported");
                if (v < 0x80) out[0] = (char)v;
                else if (v < 0x800) out[0] = (char)(0xC0 | v >> 6), out[1] = (char)(0x80 | (v & 63)), n = 2;
                else out[0] = (char)(0xE0 | v >> 12), out[1] = (char)(0x80 | ((v >> 6) & 63)), out[2] = (char)(0x80 | (v & 63)), n = 3;
                if (v == 0) return err(p, "NUL in string");
            } else if (e && map && ((map - "\"\"\\\\//b\bf\fn\nr\rt\t") % 2 == 0)) {
                out[0] = map[1];
            } else {
                return err(p, "bad escape");
            }
        } else {
            out[0] = (char)c;
        }
        MW_TRY(grow_strings(p, j->slen + (size_t)n + 1));
        memcpy(j->strings + j->slen, out, (size_t)n);
        j->slen += (size_t)n;
    }
    MW_TRY(grow_strings(p, j->slen + 1));
    j->strings[j->slen++] = 0;
    *off = start;
    return MW_OK;
}

/* string offsets are fixed up into pointers once parsing is done (the buffer moves) */
#define OFF_TAG(off) ((const char *)(uintptr_t)((off) + 1))

static mw_status value(parser *p, int *out);

static mw_status container(parser *p, int id, int obj) {
    mw_json *j = p->j;
    char close = obj ? '}' : ']';
    p->pos++;
    ws(p);
    int last = -1;
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        return MW_OK;
    }
    for (;;) {
        size_t koff = 0;
        ws(p);
        if (obj) {
            if (p->pos >= p->len || p->s[p->pos] != '"') return err(p, "expected a key");
            MW_TRY(string(p, &koff));
            ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') return err(p, "expected ':'");
            p->pos++;
        }
        int child;
        MW_TRY(value(p, &child));
        if (obj) j->nodes[child].key = OFF_TAG(koff);
        if (last < 0) j->nodes[id].first = child;
        else j->nodes[last].next = child;
        last = child;
        ws(p);
        if (p->pos >= p->len) return err(p, "unterminated container");
        char c = p->s[p->pos++];
        if (c == close) return MW_OK;
        if (c != ',') return err(p, "expected ',' or a closing bracket");
    }
}

static mw_status value(parser *p, int *out) {
    ws(p);
    if (p->pos >= p->len) return err(p, "unexpected end");
    if (++p->depth > MAX_DEPTH) return err(p, "nesting too deep");
    char c = p->s[p->pos];
    int id;
    mw_status s = MW_OK;
    if (c == '{' || c == '[') {
        MW_TRY(new_node(p, c == '{' ? MW_JSON_OBJ : MW_JSON_ARR, &id));
        s = container(p, id, c == '{');
    } else if (c == '"') {
        size_t off = 0;
        MW_TRY(new_node(p, MW_JSON_STR, &id));
        s = string(p, &off);
        p->j->nodes[id].str = OFF_TAG(off);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        size_t st = p->pos;
        if (p->s[p->pos] == '-') p->pos++;
        if (p->pos >= p->len || !(p->s[p->pos] >= '0' && p->s[p->pos] <= '9')) return err(p, "bad number");
        if (p->s[p->pos] == '0' && p->pos + 1 < p->len && p->s[p->pos + 1] >= '0' && p->s[p->pos + 1] <= '9')
            return err(p, "leading zero");
        /* JSON's grammar: int [. digits] [e [+-] digits] */
        int is_int = 1;
#define DIGITS()                                                                                   \
    do {                                                                                           \
        if (p->pos >= p->len || !(p->s[p->pos] >= '0' && p->s[p->pos] <= '9')) return err(p, "bad number"); \
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;           \
    } while (0)
        DIGITS();
        if (p->pos < p->len && p->s[p->pos] == '.') {
            p->pos++;
            is_int = 0;
            DIGITS();
        }
        if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
            p->pos++;
            is_int = 0;
            if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
            DIGITS();
        }
#undef DIGITS
        char buf[64];
        if (p->pos - st >= sizeof buf) return err(p, "number too long");
        memcpy(buf, p->s + st, p->pos - st);
        buf[p->pos - st] = 0;
        char *end;
        MW_TRY(new_node(p, MW_JSON_NUM, &id));
        mw_json_node *n = &p->j->nodes[id];
        n->num = strtod(buf, &end);
        if (*end) return err(p, "bad number");
        if (is_int) {
            long long v = strtoll(buf, &end, 10);
            n->is_int = !*end && (n->num < 9.2e18 && n->num > -9.2e18);
            n->i = v;
        }
    } else if (p->len - p->pos >= 4 && memcmp(p->s + p->pos, "true", 4) == 0) {
        MW_TRY(new_node(p, MW_JSON_BOOL, &id));
        p->j->nodes[id].i = 1;
        p->pos += 4;
    } else if (p->len - p->pos >= 5 && memcmp(p->s + p->pos, "false", 5) == 0) {
        MW_TRY(new_node(p, MW_JSON_BOOL, &id));
        p->pos += 5;
    } else if (p->len - p->pos >= 4 && memcmp(p->s + p->pos, "null", 4) == 0) {
        MW_TRY(new_node(p, MW_JSON_NULL, &id));
        p->pos += 4;
    } else {
        return err(p, "unexpected character");
    }
    p->depth--;
    *out = id;
    return s;
}

mw_status mw_json_parse(mw_json *j, const char *text, size_t len, const char *what, size_t max_bytes) {
    memset(j, 0, sizeof *j);
    parser p = {j, text, what, len, 0, max_bytes, 0};
    int root;
    mw_status s = value(&p, &root);
    if (s == MW_OK) {
        ws(&p);
        if (p.pos != len) s = err(&p, "trailing characters");
    }
    if (s != MW_OK) {
        mw_json_free(j);
        return s;
    }
    for (int i = 0; i < j->n; i++) { /* offsets -> pointers */
        if (j->nodes[i].key) j->nodes[i].key = j->strings + ((uintptr_t)j->nodes[i].key - 1);
        if (j->nodes[i].str) j->nodes[i].str = j->strings + ((uintptr_t)j->nodes[i].str - 1);
    }
    return MW_OK;
}

void mw_json_free(mw_json *j) {
    free(j->nodes);
    free(j->strings);
    memset(j, 0, sizeof *j);
}

int mw_json_get(const mw_json *j, int obj, const char *key) {
    if (obj < 0 || j->nodes[obj].type != MW_JSON_OBJ) return -1;
    for (int c = j->nodes[obj].first; c >= 0; c = j->nodes[c].next)
        if (strcmp(j->nodes[c].key, key) == 0) return c;
    return -1;
}
