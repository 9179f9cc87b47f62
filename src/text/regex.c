/* Pre-tokenizer regular expressions: a parser for the subset regex.h lists, a compiler to a
 * small backtracking program (re1's instruction set: class, split, jump, match, plus one-class
 * lookaheads) and its runner. See regex.h. */
#include "regex.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../core/status.h"
#include "unicode_tables.h"

/* ---- character classes ------------------------------------------------------------------ */

/* A set of characters: the MW_UC_* categories in cats (bit c), plus code point ranges; neg
 * complements the whole. The four categories partition the code points, so \S, \P{L} and the
 * like are category sets too. */
typedef struct cclass {
    unsigned cats, neg;
    uint32_t (*r)[2];
    int nr, cap;
} cclass;

#define CAT(c) (1u << (c))
#define CATS_ALL (CAT(MW_UC_OTHER) | CAT(MW_UC_LETTER) | CAT(MW_UC_NUMBER) | CAT(MW_UC_SPACE))

static int cls_add(cclass *c, uint32_t lo, uint32_t hi) {
    if (c->nr == c->cap) {
        int cap = c->cap ? 2 * c->cap : 4;
        void *p = realloc(c->r, (size_t)cap * sizeof *c->r);
        if (!p) return 0;
        c->r = p;
        c->cap = cap;
    }
    c->r[c->nr][0] = lo;
    c->r[c->nr][1] = hi;
    c->nr++;
    return 1;
}


/* Decodes the character at s[i] (i < n): its code point (U+FFFD for a byte that starts no
 * well-formed sequence) and byte length. */
static inline size_t decode(const unsigned char *s, size_t n, size_t i, uint32_t *cp) {
    unsigned c = s[i];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    s += i;
    n -= i;
    if (c >= 0xC2 && c <= 0xDF && n >= 2 && (s[1] & 0xC0) == 0x80) {
        *cp = (c & 0x1Fu) << 6 | (s[1] & 0x3Fu);
        return 2;
    }
    if (c >= 0xE0 && c <= 0xEF && n >= 3) {
        unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        if (s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80) {
            *cp = (c & 0x0Fu) << 12 | (s[1] & 0x3Fu) << 6 | (s[2] & 0x3Fu);
            return 3;
        }
    }
    if (c >= 0xF0 && c <= 0xF4 && n >= 4) {
        unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        if (s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 && (s[3] & 0xC0) == 0x80) {
            *cp = (c & 0x07u) << 18 | (s[1] & 0x3Fu) << 12 | (s[2] & 0x3Fu) << 6 | (s[3] & 0x3Fu);
            return 4;
        }
    }
    *cp = 0xFFFD;
    return 1;
}

static inline int category(const uint8_t *bmp, uint32_t cp) {
    if (cp < 0x80) return mw_uc_ascii[cp];
    if (cp < 0x10000 && bmp) return bmp[cp];
    return mw_uc_class(cp);
}

static inline int cls_has(const cclass *c, int cat, uint32_t cp) {
    int in = (c->cats >> cat) & 1;
    for (int i = 0; i < c->nr && !in; i++) in = cp >= c->r[i][0] && cp <= c->r[i][1];
    return in ^ (int)c->neg;
}

/* ---- the program -------------------------------------------------------------------------- */

enum { OP_CLASS, OP_SPLIT, OP_JMP, OP_LOOK, OP_NLOOK, OP_MATCH };
typedef struct inst {
    int op, x, y; /* CLASS/LOOK/NLOOK: class x; SPLIT: x first, then y; JMP: x */
} inst;

#define MAX_CODE 20000 /* instructions: counted repetitions are expanded */

struct mw_regex {
    inst *code;
    int ncode, capcode;
    cclass *cls;
    int ncls, capcls;
};

void mw_regex_free(mw_regex *re) {
    if (!re) return;
    for (int i = 0; i < re->ncls; i++) free(re->cls[i].r);
    free(re->cls);
    free(re->code);
    free(re);
}

/* ---- parsing ----------------------------------------------------------------------------- */

enum { N_CLASS, N_SEQ, N_ALT, N_REP, N_LOOK, N_EMPTY };
typedef struct node {
    int kind, cls, min, max, greedy, neg; /* max -1: unbounded */
    int first, next;                      /* children (SEQ, ALT, REP's one), sibling */
} node;

typedef struct parser {
    const unsigned char *p;
    size_t n, i;
    int icase;
    mw_regex *re;
    node *nodes;
    int nnodes, capnodes;
    const char *what;
    mw_status err; /* MW_OK until the first failure */
} parser;

static int fail(parser *ps, mw_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(parser *ps, mw_status s, const char *fmt, ...) {
    if (ps->err != MW_OK) return -1;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (s == MW_ERR_NOMEM)
        ps->err = mw_fail(s, "%s: out of memory compiling its pre-tokenizer regex", ps->what);
    else
        ps->err = mw_fail(s, "%s: the pre-tokenizer regex /%.*s/ is not supported: %s (at offset %zu)",
                          ps->what, ps->n > 200 ? 200 : (int)ps->n, (const char *)ps->p, msg, ps->i);
    return -1;
}

static int new_node(parser *ps, int kind) {
    if (ps->nnodes == ps->capnodes) {
        int cap = ps->capnodes ? 2 * ps->capnodes : 64;
        void *q = realloc(ps->nodes, (size_t)cap * sizeof *ps->nodes);
        if (!q) return fail(ps, MW_ERR_NOMEM, "-");
        ps->nodes = q;
        ps->capnodes = cap;
    }
    ps->nodes[ps->nnodes] = (node){kind, -1, 0, 0, 1, 0, -1, -1};
    return ps->nnodes++;
}

static int new_class(parser *ps) {
    mw_regex *re = ps->re;
    if (re->ncls == re->capcls) {
        int cap = re->capcls ? 2 * re->capcls : 16;
        void *q = realloc(re->cls, (size_t)cap * sizeof *re->cls);
        if (!q) return fail(ps, MW_ERR_NOMEM, "-");
        re->cls = q;
        re->capcls = cap;
    }
    re->cls[re->ncls] = (cclass){0};
    return re->ncls++;
}

/* Adds code point cp to class c, with its other cases inside (?i: ). */
static int add_char(parser *ps, int c, uint32_t cp) {
    cclass *k = &ps->re->cls[c];
    if (!cls_add(k, cp, cp)) return fail(ps, MW_ERR_NOMEM, "-");
    if (!ps->icase) return 0;
    if (cp >= 0x80) return fail(ps, MW_ERR_FORMAT, "a case-insensitive non-ASCII character");
    uint32_t lo = cp | 0x20;
    if (lo >= 'a' && lo <= 'z') {
        if (!cls_add(k, lo, lo) || !cls_add(k, lo - 0x20, lo - 0x20)) return fail(ps, MW_ERR_NOMEM, "-");
        if ((lo == 's' && !cls_add(k, 0x17F, 0x17F)) || (lo == 'k' && !cls_add(k, 0x212A, 0x212A)))
            return fail(ps, MW_ERR_NOMEM, "-");
    }
    return 0;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads one character of the pattern (UTF-8, well-formed) at ps->i. */
static int pat_char(parser *ps, uint32_t *cp) {
    size_t l = decode(ps->p, ps->n, ps->i, cp);
    if (*cp == 0xFFFD && ps->p[ps->i] >= 0x80) /* a literal U+FFFD is EF BF BD, 3 bytes */
        if (l == 1) return fail(ps, MW_ERR_FORMAT, "invalid UTF-8");
    ps->i += l;
    return 0;
}

/* An escape after '\': a single code point (*cp, returns 1) or a set added to class c (returns
 * 2); -1 on failure. */
static int escape(parser *ps, int c, uint32_t *cp) {
    if (ps->i >= ps->n) return fail(ps, MW_ERR_FORMAT, "a trailing backslash");
    unsigned e = ps->p[ps->i++];
    cclass *k = &ps->re->cls[c];
    switch (e) {
    case 'r': *cp = '\r'; return 1;
    case 'n': *cp = '\n'; return 1;
    case 't': *cp = '\t'; return 1;
    case 'f': *cp = '\f'; return 1;
    case 'v': *cp = '\v'; return 1;
    case '0':
        if (ps->i < ps->n && ps->p[ps->i] >= '0' && ps->p[ps->i] <= '9')
            return fail(ps, MW_ERR_FORMAT, "an octal or back reference");
        *cp = 0;
        return 1;
    case 's': k->cats |= CAT(MW_UC_SPACE); return 2;
    case 'S': k->cats |= CATS_ALL & ~CAT(MW_UC_SPACE); return 2;
    case 'd': return cls_add(k, '0', '9') ? 2 : fail(ps, MW_ERR_NOMEM, "-");
    case 'D':
        return cls_add(k, 0, '0' - 1) && cls_add(k, '9' + 1, 0x10FFFF) ? 2 : fail(ps, MW_ERR_NOMEM, "-");
    case 'w':
        return cls_add(k, '0', '9') && cls_add(k, 'A', 'Z') && cls_add(k, 'a', 'z') && cls_add(k, '_', '_')
                   ? 2 : fail(ps, MW_ERR_NOMEM, "-");
    case 'W':
        return cls_add(k, 0, '0' - 1) && cls_add(k, '9' + 1, 'A' - 1) && cls_add(k, 'Z' + 1, '_' - 1) &&
                       cls_add(k, '_' + 1, 'a' - 1) && cls_add(k, 'z' + 1, 0x10FFFF)
                   ? 2 : fail(ps, MW_ERR_NOMEM, "-");
    case 'p':
    case 'P': {
        size_t st = ps->i;
        if (st >= ps->n || ps->p[st] != '{') return fail(ps, MW_ERR_FORMAT, "\\p without {name}");
        size_t en = st + 1;
        while (en < ps->n && ps->p[en] != '}') en++;
        if (en >= ps->n) return fail(ps, MW_ERR_FORMAT, "an unterminated \\p{");
        const char *name = (const char *)ps->p + st + 1;
        size_t nl = en - st - 1;
        int cat = -1;
        if ((nl == 1 && name[0] == 'L') || (nl == 6 && !memcmp(name, "Letter", 6))) cat = MW_UC_LETTER;
        if ((nl == 1 && name[0] == 'N') || (nl == 6 && !memcmp(name, "Number", 6))) cat = MW_UC_NUMBER;
        if (cat < 0) return fail(ps, MW_ERR_FORMAT, "the Unicode property \\p{%.*s} (only \\p{L} and \\p{N})", (int)nl, name);
        ps->i = en + 1;
        k->cats |= e == 'p' ? CAT(cat) : CATS_ALL & ~CAT(cat);
        return 2;
    }
    case 'x': {
        int a = ps->i + 1 < ps->n ? hexval(ps->p[ps->i]) : -1, b = a >= 0 ? hexval(ps->p[ps->i + 1]) : -1;
        if (b < 0) return fail(ps, MW_ERR_FORMAT, "a malformed \\x escape");
        ps->i += 2;
        *cp = (uint32_t)(a * 16 + b);
        return 1;
    }
    case 'u': {
        uint32_t v = 0;
        if (ps->i < ps->n && ps->p[ps->i] == '{') {
            size_t j = ps->i + 1;
            int digits = 0;
            while (j < ps->n && hexval(ps->p[j]) >= 0 && digits < 7) v = v * 16 + (uint32_t)hexval(ps->p[j++]), digits++;
            if (!digits || j >= ps->n || ps->p[j] != '}' || v > 0x10FFFF)
                return fail(ps, MW_ERR_FORMAT, "a malformed \\u{} escape");
            ps->i = j + 1;
        } else {
            for (int d = 0; d < 4; d++) {
                int h = ps->i < ps->n ? hexval(ps->p[ps->i]) : -1;
                if (h < 0) return fail(ps, MW_ERR_FORMAT, "a malformed \\u escape");
                v = v * 16 + (uint32_t)h;
                ps->i++;
            }
            if (v >= 0xD800 && v <= 0xDFFF) return fail(ps, MW_ERR_FORMAT, "a surrogate \\u escape");
        }
        *cp = v;
        return 1;
    }
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9') || e >= 0x80)
            return fail(ps, MW_ERR_FORMAT, "the escape \\%c", e < 0x80 ? (char)e : '?');
        *cp = e; /* escaped punctuation: itself */
        return 1;
    }
}

/* A bracket class after '['. */
static int parse_class(parser *ps) {
    int c = new_class(ps);
    if (c < 0) return -1;
    if (ps->i < ps->n && ps->p[ps->i] == '^') ps->re->cls[c].neg = 1, ps->i++;
    for (;;) {
        if (ps->i >= ps->n) return fail(ps, MW_ERR_FORMAT, "an unterminated [");
        if (ps->p[ps->i] == ']') {
            ps->i++;
            break;
        }
        uint32_t lo;
        int r;
        if (ps->p[ps->i] == '\\') {
            ps->i++;
            r = escape(ps, c, &lo);
            if (r < 0) return -1;
            if (r == 2) continue;
        } else if (pat_char(ps, &lo) < 0) {
            return -1;
        }
        uint32_t hi = lo;
        if (ps->i + 1 < ps->n && ps->p[ps->i] == '-' && ps->p[ps->i + 1] != ']') {
            ps->i++;
            if (ps->p[ps->i] == '\\') {
                ps->i++;
                r = escape(ps, c, &hi);
                if (r < 0) return -1;
                if (r == 2) return fail(ps, MW_ERR_FORMAT, "a range ending in a class escape");
            } else if (pat_char(ps, &hi) < 0) {
                return -1;
            }
            if (hi < lo) return fail(ps, MW_ERR_FORMAT, "a range out of order");
            if (ps->icase && ((lo <= 'z' && hi >= 'A') || hi >= 0x80))
                return fail(ps, MW_ERR_FORMAT, "a case-insensitive range of letters");
            if (!cls_add(&ps->re->cls[c], lo, hi)) return fail(ps, MW_ERR_NOMEM, "-");
        } else if (add_char(ps, c, lo) < 0) {
            return -1;
        }
    }
    int nd = new_node(ps, N_CLASS);
    if (nd >= 0) ps->nodes[nd].cls = c;
    return nd;
}

static int parse_alt(parser *ps, int depth);

static int parse_atom(parser *ps, int depth) {
    unsigned ch = ps->p[ps->i];
    if (ch == '(') {
        ps->i++;
        int saved = ps->icase, look = -1;
        if (ps->i < ps->n && ps->p[ps->i] == '?') {
            const char *q = (const char *)ps->p + ps->i + 1;
            size_t left = ps->n - ps->i - 1;
            if (left >= 1 && q[0] == ':') ps->i += 2;
            else if (left >= 2 && q[0] == 'i' && q[1] == ':') ps->i += 3, ps->icase = 1;
            else if (left >= 1 && (q[0] == '!' || q[0] == '=')) look = q[0] == '!', ps->i += 2;
            else return fail(ps, MW_ERR_FORMAT, "a group of kind (?%c", left ? q[0] : ' ');
        }
        int inner = parse_alt(ps, depth + 1);
        ps->icase = saved;
        if (inner < 0) return -1;
        if (ps->i >= ps->n || ps->p[ps->i] != ')') return fail(ps, MW_ERR_FORMAT, "an unclosed (");
        ps->i++;
        if (look < 0) return inner;
        /* a lookahead of one class: (?!\S) */
        node *in = &ps->nodes[inner];
        while ((in->kind == N_SEQ || in->kind == N_ALT) && in->first >= 0 && ps->nodes[in->first].next < 0)
            in = &ps->nodes[in->first];
        if (in->kind != N_CLASS) return fail(ps, MW_ERR_FORMAT, "a lookahead of more than one character class");
        int c = in->cls, nd = new_node(ps, N_LOOK);
        if (nd >= 0) ps->nodes[nd].cls = c, ps->nodes[nd].neg = look;
        return nd;
    }
    if (ch == '[') {
        ps->i++;
        return parse_class(ps);
    }
    int c = new_class(ps);
    if (c < 0) return -1;
    if (ch == '.') {
        ps->i++;
        cclass *k = &ps->re->cls[c];
        k->neg = 1;
        if (!cls_add(k, '\n', '\n') || !cls_add(k, '\r', '\r') || !cls_add(k, 0x2028, 0x2029))
            return fail(ps, MW_ERR_NOMEM, "-");
    } else if (ch == '\\') {
        ps->i++;
        uint32_t cp;
        int r = escape(ps, c, &cp);
        if (r < 0) return -1;
        if (r == 1 && add_char(ps, c, cp) < 0) return -1;
    } else if (ch == '^' || ch == '$') {
        return fail(ps, MW_ERR_FORMAT, "the anchor %c", (char)ch);
    } else if (ch == '*' || ch == '+' || ch == '?' || ch == '{' || ch == ')' || ch == '|') {
        return fail(ps, MW_ERR_FORMAT, "'%c' where a character was expected", (char)ch);
    } else {
        uint32_t cp;
        if (pat_char(ps, &cp) < 0 || add_char(ps, c, cp) < 0) return -1;
    }
    int nd = new_node(ps, N_CLASS);
    if (nd >= 0) ps->nodes[nd].cls = c;
    return nd;
}

/* Reads a decimal number for {m,n}; -1 when there is none. */
static long read_num(parser *ps) {
    long v = -1;
    while (ps->i < ps->n && ps->p[ps->i] >= '0' && ps->p[ps->i] <= '9') {
        v = (v < 0 ? 0 : v) * 10 + (ps->p[ps->i++] - '0');
        if (v > 100000) v = 100000;
    }
    return v;
}

static int parse_seq(parser *ps, int depth) {
    int seq = new_node(ps, N_SEQ), last = -1;
    if (seq < 0) return -1;
    while (ps->i < ps->n && ps->p[ps->i] != '|' && ps->p[ps->i] != ')') {
        int a = parse_atom(ps, depth);
        if (a < 0) return -1;
        if (ps->i < ps->n && strchr("*+?{", ps->p[ps->i])) {
            long mn, mx;
            unsigned q = ps->p[ps->i++];
            if (q == '*') mn = 0, mx = -1;
            else if (q == '+') mn = 1, mx = -1;
            else if (q == '?') mn = 0, mx = 1;
            else {
                mn = read_num(ps);
                mx = mn;
                if (ps->i < ps->n && ps->p[ps->i] == ',') ps->i++, mx = read_num(ps);
                if (mn < 0 || ps->i >= ps->n || ps->p[ps->i] != '}')
                    return fail(ps, MW_ERR_FORMAT, "a malformed {m,n}");
                ps->i++;
                if (mx >= 0 && mx < mn) return fail(ps, MW_ERR_FORMAT, "{m,n} with n < m");
                if (mn > 1000 || mx > 1000) return fail(ps, MW_ERR_FORMAT, "a repetition count over 1000");
            }
            if (ps->nodes[a].kind == N_LOOK) return fail(ps, MW_ERR_FORMAT, "a quantified lookahead");
            int r = new_node(ps, N_REP);
            if (r < 0) return -1;
            ps->nodes[r].min = (int)mn, ps->nodes[r].max = (int)mx, ps->nodes[r].first = a;
            if (ps->i < ps->n && ps->p[ps->i] == '?') ps->i++, ps->nodes[r].greedy = 0;
            if (ps->i < ps->n && strchr("*+?{", ps->p[ps->i]))
                return fail(ps, MW_ERR_FORMAT, "a quantifier after a quantifier");
            a = r;
        }
        if (last < 0) ps->nodes[seq].first = a;
        else ps->nodes[last].next = a;
        last = a;
    }
    return seq;
}

static int parse_alt(parser *ps, int depth) {
    if (depth > 50) return fail(ps, MW_ERR_FORMAT, "groups nested over 50 deep");
    int alt = new_node(ps, N_ALT), last = -1;
    if (alt < 0) return -1;
    for (;;) {
        int s = parse_seq(ps, depth);
        if (s < 0) return -1;
        if (last < 0) ps->nodes[alt].first = s;
        else ps->nodes[last].next = s;
        last = s;
        if (ps->i < ps->n && ps->p[ps->i] == '|') {
            ps->i++;
            continue;
        }
        return alt;
    }
}

static int nullable(const parser *ps, int a) {
    const node *nd = &ps->nodes[a];
    switch (nd->kind) {
    case N_CLASS: return 0;
    case N_SEQ:
        for (int c = nd->first; c >= 0; c = ps->nodes[c].next)
            if (!nullable(ps, c)) return 0;
        return 1;
    case N_ALT:
        for (int c = nd->first; c >= 0; c = ps->nodes[c].next)
            if (nullable(ps, c)) return 1;
        return 0;
    case N_REP: return nd->min == 0 || nullable(ps, nd->first);
    default: return 1;
    }
}

/* ---- code generation ------------------------------------------------------------------------ */

static int emit(parser *ps, int op, int x, int y) {
    mw_regex *re = ps->re;
    if (re->ncode >= MAX_CODE) return fail(ps, MW_ERR_FORMAT, "over %d instructions once repetitions are expanded", MAX_CODE);
    if (re->ncode == re->capcode) {
        int cap = re->capcode ? 2 * re->capcode : 64;
        void *q = realloc(re->code, (size_t)cap * sizeof *re->code);
        if (!q) return fail(ps, MW_ERR_NOMEM, "-");
        re->code = q;
        re->capcode = cap;
    }
    re->code[re->ncode] = (inst){op, x, y};
    return re->ncode++;
}

/* A split whose first choice is the next instruction when greedy; the other target is patched. */
static int emit_split(parser *ps, int greedy) {
    int at = emit(ps, OP_SPLIT, -1, -1);
    if (at < 0) return -1;
    if (greedy) ps->re->code[at].x = at + 1;
    else ps->re->code[at].y = at + 1;
    return at;
}
static void patch_split(parser *ps, int at, int target) {
    inst *in = &ps->re->code[at];
    if (in->x < 0) in->x = target;
    else in->y = target;
}

static int gen(parser *ps, int a) {
    const node nd = ps->nodes[a];
    switch (nd.kind) {
    case N_CLASS: return emit(ps, OP_CLASS, nd.cls, 0) < 0 ? -1 : 0;
    case N_LOOK: return emit(ps, nd.neg ? OP_NLOOK : OP_LOOK, nd.cls, 0) < 0 ? -1 : 0;
    case N_SEQ:
        for (int c = nd.first; c >= 0; c = ps->nodes[c].next)
            if (gen(ps, c) < 0) return -1;
        return 0;
    case N_ALT: {
        int jumps[256], nj = 0;
        for (int c = nd.first; c >= 0; c = ps->nodes[c].next) {
            if (ps->nodes[c].next < 0) {
                if (gen(ps, c) < 0) return -1;
                break;
            }
            int sp = emit_split(ps, 1);
            if (sp < 0 || gen(ps, c) < 0) return -1;
            if (nj == 256) return fail(ps, MW_ERR_FORMAT, "over 256 alternatives in one group");
            if ((jumps[nj++] = emit(ps, OP_JMP, -1, 0)) < 0) return -1;
            patch_split(ps, sp, ps->re->ncode);
        }
        for (int j = 0; j < nj; j++) ps->re->code[jumps[j]].x = ps->re->ncode;
        return 0;
    }
    case N_REP: {
        if (nullable(ps, nd.first)) return fail(ps, MW_ERR_FORMAT, "a quantified subexpression that can match the empty string");
        for (int k = 0; k < nd.min; k++)
            if (gen(ps, nd.first) < 0) return -1;
        if (nd.max < 0) { /* L: split body, out; body; jmp L */
            int sp = emit_split(ps, nd.greedy);
            if (sp < 0 || gen(ps, nd.first) < 0 || emit(ps, OP_JMP, sp, 0) < 0) return -1;
            patch_split(ps, sp, ps->re->ncode);
            return 0;
        }
        int splits[1001], ns = 0; /* (X(X)?)? : every split leaves to the end */
        for (int k = nd.min; k < nd.max; k++) {
            if ((splits[ns++] = emit_split(ps, nd.greedy)) < 0 || gen(ps, nd.first) < 0) return -1;
        }
        for (int k = 0; k < ns; k++) patch_split(ps, splits[k], ps->re->ncode);
        return 0;
    }
    default: return 0;
    }
}

mw_status mw_regex_compile(mw_regex **out, const char *pat, size_t n, const char *what) {
    *out = NULL;
    parser ps = {.p = (const unsigned char *)pat, .n = n, .what = what, .err = MW_OK};
    if (!(ps.re = calloc(1, sizeof *ps.re))) return mw_fail(MW_ERR_NOMEM, "%s: out of memory", what);
    int root = n ? parse_alt(&ps, 0) : -1;
    if (root >= 0 && ps.i < n) fail(&ps, MW_ERR_FORMAT, "an unmatched )");
    if (ps.err == MW_OK && (root < 0 || nullable(&ps, root)))
        fail(&ps, MW_ERR_FORMAT, "it can match the empty string");
    if (ps.err == MW_OK && gen(&ps, root) == 0) emit(&ps, OP_MATCH, 0, 0);
    free(ps.nodes);
    if (ps.err != MW_OK) {
        mw_regex_free(ps.re);
        return ps.err;
    }
    *out = ps.re;
    return MW_OK;
}

/* ---- matching ------------------------------------------------------------------------------ */

/* What a match read of the text: the end of the furthest character it decoded (counted as 4
 * bytes unless ASCII), and whether it looked past the end (then a longer text could match
 * otherwise). */
typedef struct seen {
    size_t far;
    int end;
} seen;

static inline void saw(seen *v, const unsigned char *s, size_t pos, size_t n) {
    if (pos >= n) v->end = 1;
    else if (pos + (s[pos] < 0x80 ? 1 : 4) > v->far) v->far = pos + (s[pos] < 0x80 ? 1 : 4);
}

typedef struct thread {
    int pc;
    size_t pos;
} thread;

#define STEPS_BEFORE_PIKE 4096

/* One attempt anchored at start by backtracking: 1 and *end, 0 no match, -1 out of memory, -2
 * more than STEPS_BEFORE_PIKE steps (then the attempt is run again by pike). */
static int attempt(const mw_regex *re, const uint8_t *bmp, const unsigned char *s, size_t n,
                   size_t start, size_t *end, seen *v) {
    thread local[64], *stack = local;
    size_t nst = 0, cap = 64, steps = 0;
    int result = 0;
    stack[nst++] = (thread){0, start};
    while (nst && result == 0) {
        thread th = stack[--nst];
        for (;;) {
            if (++steps > STEPS_BEFORE_PIKE) {
                result = -2;
                break;
            }
            const inst *in = &re->code[th.pc];
            if (in->op == OP_CLASS) {
                saw(v, s, th.pos, n);
                if (th.pos >= n) break;
                uint32_t cp;
                size_t l = decode(s, n, th.pos, &cp);
                if (!cls_has(&re->cls[in->x], category(bmp, cp), cp)) break;
                th.pos += l;
                th.pc++;
            } else if (in->op == OP_SPLIT) {
                if (nst == cap) {
                    thread *q = malloc(2 * cap * sizeof *q);
                    if (!q) { result = -1; break; }
                    memcpy(q, stack, nst * sizeof *q);
                    if (stack != local) free(stack);
                    stack = q;
                    cap *= 2;
                }
                stack[nst++] = (thread){in->y, th.pos};
                th.pc = in->x;
            } else if (in->op == OP_JMP) {
                th.pc = in->x;
            } else if (in->op == OP_LOOK || in->op == OP_NLOOK) {
                int has = 0;
                saw(v, s, th.pos, n);
                if (th.pos < n) {
                    uint32_t cp;
                    decode(s, n, th.pos, &cp);
                    has = cls_has(&re->cls[in->x], category(bmp, cp), cp);
                }
                if (has != (in->op == OP_LOOK)) break;
                th.pc++;
            } else { /* OP_MATCH */
                *end = th.pos;
                result = 1;
                break;
            }
        }
    }
    if (stack != local) free(stack);
    return result;
}

/* The same attempt as a Pike VM (Thompson's simulation with the threads kept in priority order,
 * as RE2 runs leftmost-first matching): every thread advances one character at a time, so a match
 * over m characters takes O(m * ncode) time and O(ncode) memory, whatever the text, and gives
 * the backtracker's answer (no backreferences: a thread's future depends on (pc, pos) alone; of
 * two threads at one pc the first in priority order wins, as backtracking would try it first). */
typedef struct pike {
    int *list[2], *stack;
    unsigned *mark, gen;
} pike;

static void pike_free(pike *k) {
    free(k->list[0]);
    free(k->mark);
}

/* Adds pc at pos and what it reaches without reading a character to list (n_ entries), in
 * priority order. */
static void pike_add(const mw_regex *re, const uint8_t *bmp, pike *k, int *list, int *nl, int pc0,
                     const unsigned char *s, size_t n, size_t pos, seen *v) {
    int ns = 0;
    k->stack[ns++] = pc0;
    while (ns) {
        int pc = k->stack[--ns];
        if (k->mark[pc] == k->gen) continue;
        k->mark[pc] = k->gen;
        const inst *in = &re->code[pc];
        switch (in->op) {
        case OP_JMP: k->stack[ns++] = in->x; break;
        case OP_SPLIT: k->stack[ns++] = in->y, k->stack[ns++] = in->x; break; /* x first */
        case OP_LOOK:
        case OP_NLOOK: {
            int has = 0;
            saw(v, s, pos, n);
            if (pos < n) {
                uint32_t cp;
                decode(s, n, pos, &cp);
                has = cls_has(&re->cls[in->x], category(bmp, cp), cp);
            }
            if (has == (in->op == OP_LOOK)) k->stack[ns++] = pc + 1;
            break;
        }
        default: list[(*nl)++] = pc; /* CLASS, MATCH */
        }
    }
}

/* A new generation of marks; on wrapping around, the old marks are cleared. */
static void pike_next_gen(pike *k, const mw_regex *re) {
    if (++k->gen == 0) {
        memset(k->mark, 0, (size_t)re->ncode * sizeof *k->mark);
        k->gen = 1;
    }
}

static int pike_attempt(const mw_regex *re, const uint8_t *bmp, pike *k, const unsigned char *s,
                        size_t n, size_t start, size_t *end, seen *v) {
    if (!k->mark) { /* a mark is cleared by the next generation; the stack holds each pc at most twice */
        const size_t nc = (size_t)re->ncode;
        k->list[0] = malloc((4 * nc + 1) * sizeof(int));
        k->mark = calloc(nc, sizeof *k->mark);
        if (!k->list[0] || !k->mark) return -1;
        k->list[1] = k->list[0] + nc;
        k->stack = k->list[0] + 2 * nc;
    }
    int cur = 0, nc = 0, found = 0;
    size_t pos = start;
    pike_next_gen(k, re);
    pike_add(re, bmp, k, k->list[cur], &nc, 0, s, n, pos, v);
    while (nc) {
        uint32_t cp = 0;
        size_t l = 1;
        int cat = 0;
        int nn = 0, *next = k->list[!cur];
        pike_next_gen(k, re);
        if (pos < n) l = decode(s, n, pos, &cp), cat = category(bmp, cp);
        for (int i = 0; i < nc; i++) {
            const inst *in = &re->code[k->list[cur][i]];
            if (in->op == OP_MATCH) { /* the threads after this one are of lower priority */
                *end = pos;
                found = 1;
                break;
            }
            saw(v, s, pos, n);
            if (pos < n && cls_has(&re->cls[in->x], cat, cp))
                pike_add(re, bmp, k, next, &nn, k->list[cur][i] + 1, s, n, pos + l, v);
        }
        cur = !cur, nc = nn, pos += l;
    }
    return found;
}

int mw_regex_find_need(const mw_regex *re, const uint8_t *bmp, const unsigned char *s, size_t n,
                       size_t from, size_t *ms, size_t *me, size_t *need) {
    seen v = {0, 0};
    pike k = {0};
    int r = 0;
    size_t i = from;
    for (; i < n;) {
        size_t end = i;
        r = attempt(re, bmp, s, n, i, &end, &v);
        if (r == -2) r = pike_attempt(re, bmp, &k, s, n, i, &end, &v); /* long: in linear time */
        if (r < 0) break;
        if (r == 1) {
            *ms = i;
            *me = end;
            break;
        }
        uint32_t cp;
        saw(&v, s, i, n);
        i += decode(s, n, i, &cp);
    }
    pike_free(&k);
    if (r == 0) v.end = 1; /* no match in the text: a longer one may hold one */
    if (need) *need = v.end ? SIZE_MAX : v.far;
    return r;
}

int mw_regex_find(const mw_regex *re, const uint8_t *bmp, const unsigned char *s, size_t n,
                  size_t from, size_t *ms, size_t *me) {
    return mw_regex_find_need(re, bmp, s, n, from, ms, me, NULL);
}
