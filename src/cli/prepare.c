/* memwall prepare (text files into a token set: PREFIX.train.bin, PREFIX.val.bin, their shards and
 * manifest, streamed within --memory) and memwall verify (a set's shards against their checksums). */
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/arena.h"
#include "../core/fsutil.h"
#include "../text/docsplit.h"
#include "../data/tokset.h"
#include "../text/tokstream.h"
#include "cli.h"
#include "textcmd.h"


/* ---- prepare: streamed -----------------------------------------------------------------------
 * The documents (each file, or the blank-line-separated pieces of each file) go through in batches
 * of about `piece` bytes of text: read, tokenized on every thread, appended to PREFIX.train.bin's
 * temporary file. Ids are the tokenizer's per document, so batches change nothing: the files are
 * those a whole-input prepare writes, for any --memory and thread count. The validation part is
 * the end of the token stream, as before: once the total is known, its last --val-fraction is
 * copied from the temporary file into PREFIX.val.bin and the train file keeps the rest. Memory:
 * the tokenizer, then twelve pieces of what --memory leaves it (prep_input counts them). A
 * document longer than half a piece goes in parts of at most half a piece, cut where the
 * pre-tokenizer cuts anyway (mw_tokstream_cut), so its ids are those of the whole document. */

/* A document longer than half a piece goes in parts (cut by mw_tokstream_cut where its ids are
 * those of the whole): flag DOC_REST marks a part after the first, DOC_MORE one with more after it. */
enum { DOC_REST = 1, DOC_MORE = 2 };
typedef struct docs {
    const char **text;
    size_t *len, n, cap, bytes;
    unsigned char *rest, *more;
} docs;

static void add_doc(docs *d, const char *text, size_t len, int flags) {
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 256;
        d->text = realloc(d->text, d->cap * sizeof *d->text);
        d->len = realloc(d->len, d->cap * sizeof *d->len);
        d->rest = realloc(d->rest, d->cap);
        d->more = realloc(d->more, d->cap);
        if (!d->text || !d->len || !d->rest || !d->more) die(1, "out of memory");
    }
    d->text[d->n] = text;
    d->rest[d->n] = !!(flags & DOC_REST);
    d->more[d->n] = !!(flags & DOC_MORE);
    d->len[d->n++] = len;
    d->bytes += len;
}


static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct file_id {
    dev_t dev;
    ino_t ino;
    size_t i; /* its position among the inputs */
    int in;   /* the --in it came from */
    int link; /* its name is a symbolic link */
} file_id;

/* by device and inode, then by position */
static int cmp_id(const void *a, const void *b) {
    const file_id *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* path (NULL: stdin) appended to *files; listed: it came from a directory or a glob (then
 * --skip-unreadable may skip it) */
static void add_file(char ***files, char **from, size_t *nf, const char *path, int listed) {
    *files = realloc(*files, (*nf + 1) * sizeof **files);
    *from = realloc(*from, *nf + 1);
    char *copy = path ? strdup(path) : NULL;
    if (!*files || !*from || (path && !copy)) die(1, "out of memory");
    (*files)[*nf] = copy;
    (*from)[(*nf)++] = (char)listed;
}

/* a directory's regular files, sorted by name */
static void add_dir(char ***files, char **from, size_t *nf, uint64_t *total, const char *in) {
    DIR *dir = opendir(in);
    if (!dir) die(1, "cannot list %s: %s", in, strerror(errno));
    const size_t n0 = *nf;
    struct dirent *e;
    struct stat st;
    while ((e = readdir(dir))) {
        if (e->d_name[0] == '.') continue;
        char p[4096];
        const size_t il = strlen(in);
        snprintf(p, sizeof p, "%s%s%s", in, il && in[il - 1] == '/' ? "" : "/", e->d_name);
        if (stat(p, &st) != 0) { /* a dangling link, or no permission: opening it will say */
            if (lstat(p, &st) != 0) continue; /* gone since it was listed */
            st.st_mode = S_IFREG, st.st_size = 0;
        }
        if (!S_ISREG(st.st_mode)) continue; /* subdirectories, devices, fifos */
        add_file(files, from, nf, p, 1);
        *total += (uint64_t)st.st_size;
    }
    closedir(dir);
    qsort(*files + n0, *nf - n0, sizeof **files, cmp_str);
    if (*nf == n0) die(1, "prepare: %s holds no files", in);
}

/* The input files of every --in, in order (a file; a directory's regular files sorted by name; a
 * glob's matches sorted; NULL: stdin), into *from whether each came from a directory or glob, and
 * their total size (0 when stdin is among them: unknown) */
static char **list_inputs(const opts *o, size_t *nf, uint64_t *total, char **from) {
    struct stat st;
    char **files = NULL;
    int has_stdin = 0;
    size_t start[sizeof o->ins / sizeof o->ins[0] + 1]; /* the files of --in i: [start[i], start[i + 1]) */
    *nf = 0, *total = 0, *from = NULL;
    for (int i = 0; i < o->n_in; i++) {
        const char *in = o->ins[i];
        start[i] = *nf;
        if (strcmp(in, "-") == 0) {
            if (has_stdin++) die(1, "prepare: --in - (stdin) given twice");
            add_file(&files, from, nf, NULL, 0);
        } else if (stat(in, &st) == 0 && S_ISDIR(st.st_mode)) {
            add_dir(&files, from, nf, total, in);
        } else if (stat(in, &st) == 0 || !strpbrk(in, "*?[")) {
            if (access(in, F_OK) != 0) die(1, "cannot open --in %s: %s", in, strerror(errno));
            add_file(&files, from, nf, in, 0);
            *total += (uint64_t)st.st_size;
        } else { /* a glob the shell did not expand (quoted): its matches, sorted */
            glob_t g;
            int r = glob(in, 0, NULL, &g);
            if (r == GLOB_NOMATCH) die(1, "prepare: --in %s matches no file", in);
            if (r != 0) die(1, "prepare: cannot expand --in %s", in);
            size_t added = 0;
            for (size_t k = 0; k < g.gl_pathc; k++) { /* as a directory's: regular files only */
                const int ok = stat(g.gl_pathv[k], &st) == 0;
                if (ok && !S_ISREG(st.st_mode)) continue;
                add_file(&files, from, nf, g.gl_pathv[k], 1); /* a dangling link: opening it will say */
                *total += ok ? (uint64_t)st.st_size : 0;
                added++;
            }
            globfree(&g);
            if (!added) die(1, "prepare: --in %s matches no regular file", in);
        }
    }
    start[o->n_in] = *nf;
    if (has_stdin) *total = 0;
    /* A file given twice by two --in (a glob and a name, two globs, a folder and a file in it) would
     * be two documents, perhaps one in each split: refused, naming both. Names of one file found by
     * listing one folder or glob (a link beside its target, hard links) are one document: read
     * once, under its own name rather than a symbolic link's (else the first), with a note. */
    file_id *ids = malloc((*nf ? *nf : 1) * sizeof *ids);
    char *drop = calloc(*nf ? *nf : 1, 1);
    size_t n = 0;
    if (!ids || !drop) die(1, "out of memory");
    for (int g = 0; g < o->n_in; g++)
        for (size_t i = start[g]; i < start[g + 1]; i++) {
            struct stat ls;
            if (files[i] && stat(files[i], &st) == 0)
                ids[n++] = (file_id){st.st_dev, st.st_ino, i, g, lstat(files[i], &ls) == 0 && S_ISLNK(ls.st_mode)};
        }
    qsort(ids, n, sizeof *ids, cmp_id);
    for (size_t b = 1, a = 0; b < n; b++) { /* a: the first name of the file ids[b] is */
        if (ids[b].dev != ids[a].dev || ids[b].ino != ids[a].ino) a = b;
        else if (ids[b].in != ids[a].in) {
            const char *x = files[ids[a].i], *y = files[ids[b].i], *ix = o->ins[ids[a].in], *iy = o->ins[ids[b].in];
            const int lx = strcmp(x, ix) != 0, ly = strcmp(y, iy) != 0; /* found by listing: say which --in */
            die(1, "prepare: %s%s%s%s and %s%s%s%s are the same file, given twice by --in", x, lx ? " (in --in " : "",
                lx ? ix : "", lx ? ")" : "", y, ly ? " (in --in " : "", ly ? iy : "", ly ? ")" : "");
        }
    }
    int notes = 0;
    for (size_t a = 0, b; a < n; a = b) {
        size_t keep = a;
        for (b = a + 1; b < n && ids[b].dev == ids[a].dev && ids[b].ino == ids[a].ino; b++)
            if (ids[keep].link && !ids[b].link) keep = b;
        for (size_t k = a; k < b; k++) {
            if (k == keep) continue;
            drop[ids[k].i] = 1;
            if (stat(files[ids[k].i], &st) == 0 && *total) *total -= (uint64_t)st.st_size < *total ? (uint64_t)st.st_size : *total;
            if (notes++ < 8)
                fprintf(stderr, "memwall: note: prepare: %s is %s %s, found by the same --in %s: read once, as %s\n",
                        files[ids[k].i], ids[k].link ? "a link to" : "another name of", files[ids[keep].i],
                        o->ins[ids[k].in], files[ids[keep].i]);
        }
    }
    if (notes > 8) fprintf(stderr, "memwall: note: prepare: %d names in all were another's, each read once\n", notes);
    size_t w = 0;
    for (size_t i = 0; i < *nf; i++) {
        if (drop[i]) {
            free(files[i]);
            continue;
        }
        files[w] = files[i], (*from)[w++] = (*from)[i];
    }
    *nf = w;
    free(ids), free(drop);
    return files;
}

typedef struct prep {
    const opts *o;
    mw_tokenizer *tok;
    int threads, tty, quiet; /* quiet: --progress none */
    size_t piece; /* text bytes per batch */
    const int32_t *pre, *post; /* the special tokens around each document */
    size_t npre, npost;
    docs d;            /* the batch, pointing into held */
    char **held;       /* text buffers the batch points into */
    size_t nheld, heldcap;
    int32_t stage[1 << 16]; /* ids on their way to the file */
    size_t nstage;
    uint64_t ndocs, bytes, total; /* documents and bytes done; the input's size (0: unknown) */
    uint64_t skipped;             /* files --skip-unreadable skipped */
    const char *what;             /* the input being read (for errors) */
    int fresh;                    /* documents added since the last flush point into the buffer */
    int in_doc;                   /* a document's first parts are done: the next text continues it */
    uint64_t nparted;             /* documents tokenized in parts */
    size_t word_max;              /* the longest word the tokenizer merges */
    int listed;                   /* the input came from a directory or a glob */
    double every, last;           /* not a terminal: seconds between progress lines, and the last one */
    double t0;
} prep;

/* ---- the shards prepare writes ------------------------------------------------------------
 * A split is written as it comes in shards of --shard-tokens; each full shard is finished (a
 * whole version-3 file) under its temporary name. Nothing is renamed into place until the end,
 * when the validation cut is known: then the files get their names (one file per split, or
 * numbered shards and a manifest written last). At an early exit every temporary file goes. */

typedef struct outfile {
    char tmp[4400];
    uint64_t tokens;
    uint32_t crc; /* of its checksum table, for the manifest */
    int gone;     /* renamed into place or removed */
} outfile;

typedef struct stream {
    mw_data_writer *w; /* the shard being filled (NULL: none yet) */
    char cur[4400];    /* its temporary file */
    outfile *f;        /* the finished ones */
    size_t n, cap;
    const char *prefix, *split;
    uint32_t vocab;
    int width;
    uint64_t per; /* tokens per shard */
    mw_tokenizer_id tid;
} stream;

static stream prep_s[2]; /* 0: all the tokens read, in order; 1: the validation cut */
static void prep_cleanup(void) {
    for (int k = 0; k < 2; k++) {
        mw_data_writer_abort(prep_s[k].w), prep_s[k].w = NULL;
        for (size_t i = 0; i < prep_s[k].n; i++)
            if (!prep_s[k].f[i].gone) unlink(prep_s[k].f[i].tmp), prep_s[k].f[i].gone = 1;
    }
}

/* SIGINT, SIGTERM, SIGHUP: the temporary files go (unlink only: safe in a handler), then the
 * signal's own action */
static void prep_signal(int sig) {
    for (int k = 0; k < 2; k++) {
        if (prep_s[k].w) unlink(prep_s[k].cur);
        for (size_t i = 0; i < prep_s[k].n; i++)
            if (!prep_s[k].f[i].gone) unlink(prep_s[k].f[i].tmp);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* the signals prep_signal handles held off while the lists it reads change (1), then let in (0) */
static void hold_signals(int on) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT), sigaddset(&set, SIGTERM), sigaddset(&set, SIGHUP);
    sigprocmask(on ? SIG_BLOCK : SIG_UNBLOCK, &set, NULL);
}

static void stream_close(stream *s) {
    if (!s->w) return;
    hold_signals(1);
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        if (!(s->f = realloc(s->f, s->cap * sizeof *s->f))) die(1, "out of memory");
    }
    outfile *f = &s->f[s->n];
    memset(f, 0, sizeof *f);
    f->tokens = mw_data_writer_count(s->w);
    mw_status st = mw_data_writer_finish(s->w, f->tokens, f->tmp, sizeof f->tmp, &f->crc);
    s->w = NULL;
    if (st != MW_OK) die(1, "%s", mw_last_error());
    s->n++;
    hold_signals(0);
}

static void stream_append(stream *s, const int32_t *ids, size_t n) {
    while (n) {
        if (!s->w) {
            char path[4300];
            snprintf(path, sizeof path, "%s.%s.%03zu.bin", s->prefix, s->split, s->n);
            hold_signals(1);
            if (mw_data_writer_open(&s->w, path, s->vocab, s->width, &s->tid) != MW_OK) die(1, "%s", mw_last_error());
            snprintf(s->cur, sizeof s->cur, "%s", mw_data_writer_tmp(s->w));
            hold_signals(0);
        }
        const uint64_t room = s->per - mw_data_writer_count(s->w);
        const size_t k = n < room ? n : (size_t)room;
        if (mw_data_writer_append(s->w, ids, k) != MW_OK) die(1, "%s", mw_last_error());
        ids += k, n -= k;
        if (mw_data_writer_count(s->w) == s->per) stream_close(s);
    }
}

static void stage_ids(prep *p, const int32_t *ids, size_t n) {
    while (n) {
        size_t k = sizeof p->stage / sizeof *p->stage - p->nstage;
        k = n < k ? n : k;
        memcpy(p->stage + p->nstage, ids, k * sizeof *ids);
        p->nstage += k, ids += k, n -= k;
        if (p->nstage == sizeof p->stage / sizeof *p->stage) {
            stream_append(&prep_s[0], p->stage, p->nstage);
            p->nstage = 0;
        }
    }
}

/* The validation cut: the last n_val of the n tokens read go to stream 1 (copied from stream 0's
 * files, read back in pieces through stage), and stream 0's files are cut to the rest. */
static void cut_validation(prep *p, uint64_t n, uint64_t n_val) {
    stream *s = &prep_s[0];
    const uint64_t keep = n - n_val;
    const size_t S = sizeof p->stage / sizeof *p->stage;
    uint64_t at = 0;
    for (size_t i = 0; i < s->n; at += s->f[i++].tokens) {
        outfile *f = &s->f[i];
        if (at + f->tokens <= keep) continue;
        const uint64_t from = keep > at ? keep - at : 0;
        mw_data *d;
        if (mw_data_open(&d, f->tmp) != MW_OK) die(1, "%s", mw_last_error());
        for (uint64_t j = from; j < f->tokens; j += S) {
            const size_t k = f->tokens - j < S ? (size_t)(f->tokens - j) : S;
            if (mw_data_read(d, j, k, p->stage) != MW_OK) die(1, "%s", mw_last_error());
            stream_append(&prep_s[1], p->stage, k);
        }
        mw_data_close(d);
    }
    stream_close(&prep_s[1]);
    at = 0;
    for (size_t i = 0; i < s->n; i++) {
        outfile *f = &s->f[i];
        const uint64_t t = f->tokens;
        if (at >= keep) {
            unlink(f->tmp);
            f->gone = 1, f->tokens = 0;
        } else if (at + t > keep) {
            if (mw_data_file_cut(f->tmp, keep - at, &f->crc) != MW_OK) die(1, "%s", mw_last_error());
            f->tokens = keep - at;
        }
        at += t;
    }
}

/* the set --append adds to: PREFIX.manifest.json, or the files PREFIX.train.bin and
 * PREFIX.val.bin taken as a set of one shard each (version 3 needed: shards carry checksums) */
static void load_existing(const char *prefix, const char *mpath, mw_manifest *m) {
    if (access(mpath, F_OK) == 0) {
        if (mw_manifest_read(m, mpath) != MW_OK) die(1, "prepare --append: %s", mw_last_error());
        return;
    }
    memset(m, 0, sizeof *m);
    mw_data *d[2] = {NULL, NULL};
    const char *split[2] = {"train", "val"};
    mw_set_part part = {0, 0, 0, 0};
    char a[128], b[128];
    for (int k = 0; k < 2; k++) {
        char path[4200];
        snprintf(path, sizeof path, "%s.%s.bin", prefix, split[k]);
        if (k == 0 && access(path, F_OK) != 0)
            die(1, "prepare --append: there is no set at %s to add to (neither %s nor %s exists)", prefix, mpath, path);
        if (k == 1 && access(path, F_OK) != 0) break;
        if (mw_data_open(&d[k], path) != MW_OK) die(1, "prepare --append: %s", mw_last_error());
        if (mw_data_version(d[k]) != 3)
            die(1, "prepare --append: %s is a version-%d token file, without block checksums: prepare it again to add to it",
                path, mw_data_version(d[k]));
        if (k == 1 && (mw_data_vocab(d[1]) != mw_data_vocab(d[0]) || mw_data_width(d[1]) != mw_data_width(d[0]) ||
                       mw_tokenizer_id_conflict(mw_data_tokenizer(d[1]), mw_data_tokenizer(d[0]))))
            die(1, "prepare --append: %s.train.bin (%s, vocabulary %u, width %d) and %s.val.bin (%s, %u, %d) are not one set",
                prefix, mw_tokenizer_id_str(mw_data_tokenizer(d[0]), a, sizeof a), mw_data_vocab(d[0]), mw_data_width(d[0]),
                prefix, mw_tokenizer_id_str(mw_data_tokenizer(d[1]), b, sizeof b), mw_data_vocab(d[1]), mw_data_width(d[1]));
        if (mw_data_count(d[k]) == 0) {
            if (k == 0) die(1, "prepare --append: %s holds no tokens", path);
            continue; /* an empty validation file: no shard */
        }
        const char *slash = strrchr(path, '/');
        if (mw_manifest_add_shard(m, k, slash ? slash + 1 : path, mw_data_count(d[k]), mw_data_shard_crc(d[k], 0)) != MW_OK)
            die(1, "prepare --append: %s", mw_last_error());
        *(k ? &part.val : &part.train) = mw_data_count(d[k]);
    }
    m->vocab = mw_data_vocab(d[0]);
    m->width = mw_data_width(d[0]);
    m->tok = *mw_data_tokenizer(d[0]);
    if (mw_manifest_add_part(m, &part) != MW_OK) die(1, "%s", mw_last_error());
    mw_data_close(d[0]), mw_data_close(d[1]);
}

/* whether name is "BASE.train.N.bin" or "BASE.val.N.bin" (N decimal digits): a shard prepare
 * named at the prefix whose last part is base */
static int is_shard_name(const char *name, const char *base) {
    const size_t bl = strlen(base);
    if (strncmp(name, base, bl) != 0) return 0;
    const char *p = name + bl;
    if (strncmp(p, ".train.", 7) == 0) p += 7;
    else if (strncmp(p, ".val.", 5) == 0) p += 5;
    else return 0;
    const char *q = p;
    while (*q >= '0' && *q <= '9') q++;
    return q > p && strcmp(q, ".bin") == 0;
}

/* removes the numbered shards an earlier prepare left at PREFIX that m (NULL: none) does not list */
static void remove_stale(const char *prefix, const mw_manifest *m) {
    char dir[4200];
    const char *slash = strrchr(prefix, '/'), *base = slash ? slash + 1 : prefix;
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - prefix) + 1 : 1, slash ? prefix : ".");
    DIR *dp = opendir(dir);
    if (!dp) return;
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (!is_shard_name(e->d_name, base)) continue;
        int listed = 0;
        for (int k = 0; m && k < 2 && !listed; k++)
            for (int i = 0; i < m->n[k] && !listed; i++) listed = strcmp(m->shard[k][i].file, e->d_name) == 0;
        if (listed) continue;
        char path[4500];
        snprintf(path, sizeof path, "%s%s%s", dir, slash ? "" : "/", e->d_name);
        unlink(path);
    }
    closedir(dp);
}

static void rename_into(outfile *f, const char *path) {
    if (rename(f->tmp, path) != 0) die(1, "cannot write %s: %s", path, strerror(errno));
    f->gone = 1;
}

static void fmt_eta(char *b, size_t n, double s) {
    if (s < 0) snprintf(b, n, "?");
    else if (s < 3600) snprintf(b, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else snprintf(b, n, "%dh%02dm", (int)s / 3600, (int)s % 3600 / 60);
}

/* On a terminal a line redrawn in place; elsewhere (a log) a line every MEMWALL_PROGRESS_SECONDS
 * (default 10), as train's and eval's progress. */
static void progress(prep *p) {
    if (p->quiet) return;
    const double now = now_s();
    if (!p->tty) {
        if (p->every > 0 && now - p->last < p->every) return;
        p->last = now;
    }
    const double secs = now - p->t0, mb = p->bytes / 1e6, rate = secs > 0 ? mb / secs : 0.0;
    char eta[32];
    if (p->total) {
        const double frac = (double)p->bytes / (double)p->total;
        const int w = 30, k = (int)(frac * w > w ? w : frac * w);
        fmt_eta(eta, sizeof eta, rate > 0 && frac <= 1 ? (p->total - p->bytes) / 1e6 / rate : -1);
        fprintf(stderr, "%s  [%.*s%*s] %3.0f%%  %.1f of %.1f MB  %.1f MB/s  ETA %s   %s", p->tty ? "\r" : "prepare:", k,
                "##############################", w - k, "", frac * 100, mb, p->total / 1e6, rate, eta, p->tty ? "" : "\n");
    } else {
        fprintf(stderr, "%s  %.1f MB  %.1f MB/s   %s", p->tty ? "\r" : "prepare:", mb, rate, p->tty ? "" : "\n");
    }
    fflush(stderr);
}

/* Tokenizes the batch and appends it, at most half a piece of text at a time (each document is at
 * most that); frees the text it held. */
static void flush_batch(prep *p) {
    for (size_t i0 = 0; i0 < p->d.n;) {
        size_t i1 = i0, b = 0;
        while (i1 < p->d.n && (i1 == i0 || b + p->d.len[i1] <= p->piece / 2)) b += p->d.len[i1++];
        int32_t **part = calloc(i1 - i0, sizeof *part);
        size_t *plen = calloc(i1 - i0, sizeof *plen);
        if (!part || !plen) die(1, "out of memory");
        const mw_status es = mw_tokenizer_encode_parts(p->tok, p->d.text + i0, p->d.len + i0, p->d.rest + i0, i1 - i0,
                                                       p->threads, part, plen);
        if (es != MW_OK)
            die(1, "prepare: %s%s", mw_last_error(),
                es == MW_ERR_ARG ? ": give a larger --memory (a thread merges a word in a twelfth of what "
                                                 "the tokenizer leaves)" : "");
        for (size_t i = 0; i < i1 - i0; i++) {
            /* GPT-2's convention: <|endoftext|> starts a document; a tokenizer.json's template
             * (or tokenizer_config.json) says its own: <s>, <|begin_of_text|>, ... (a document
             * in parts: before its first, after its last) */
            if (!p->d.rest[i0 + i]) stage_ids(p, p->pre, p->npre);
            stage_ids(p, part[i], plen[i]);
            if (!p->d.more[i0 + i]) stage_ids(p, p->post, p->npost), p->ndocs++;
            free(part[i]);
        }
        free(part), free(plen);
        p->bytes += b;
        i0 = i1;
        progress(p);
    }
    p->d.n = 0, p->d.bytes = 0, p->fresh = 0;
    for (size_t i = 0; i < p->nheld; i++) free(p->held[i]);
    p->nheld = 0;
}

/* The batch keeps buf (its documents point into it) until it is flushed. */
static void hold(prep *p, char *buf) {
    if (p->nheld == p->heldcap) {
        p->heldcap = p->heldcap ? 2 * p->heldcap : 16;
        p->held = realloc(p->held, p->heldcap * sizeof *p->held);
        if (!p->held) die(1, "out of memory");
    }
    p->held[p->nheld++] = buf;
}

/* Reads up to n bytes (fewer only at the end); dies on a read error. */
static size_t read_some(FILE *f, char *buf, size_t n, const char *what) {
    size_t got = fread(buf, 1, n, f);
    if (got < n && ferror(f)) die(1, "cannot read %s: %s", what, strerror(errno));
    return got;
}

/* No cut within half a piece: one pre-token (a run of letters, of spaces, ... that the
 * pre-tokenizer does not split) is longer, or the tokenizer cannot tokenize a text in parts
 * (reason: mw_last_error's) */
static void too_big(const prep *p, const char *what, const char *reason) {
    char b[32], c[32];
    if (reason)
        die(1, "prepare: %s: a document longer than %s, the most --memory %s allows, and %s; give a larger --memory%s",
            what, mw_fmt_bytes(p->piece / 2, b, sizeof b), mw_fmt_bytes(p->o->prep_memory, c, sizeof c), reason,
            p->o->split_blank ? "" : ", or --split-blank-lines if blank lines separate its documents");
    if (p->word_max == SIZE_MAX) /* bytes: only --split-blank-lines' rule can leave no cut */
        die(1, "prepare: %s: a run of white space longer than %s, which --split-blank-lines cannot cut (it may hold a "
               "blank line); give a larger --memory",
            what, mw_fmt_bytes(p->piece / 2, b, sizeof b));
    die(1, "prepare: %s: a single word (pre-token: a run of letters, spaces, ... that nothing splits) longer than %s; "
           "--memory %s lets a thread merge words of up to %zu bytes: give a larger --memory",
        what, mw_fmt_bytes(p->piece / 2, b, sizeof b), mw_fmt_bytes(p->o->prep_memory, c, sizeof c), p->word_max);
}

/* The batch is full: a piece of text, or so many documents that their bookkeeping (the
 * batch's arrays, the tokenizer's array per document) would count (small documents) */
static int batch_full(const prep *p) { return p->d.bytes >= p->piece || p->d.n >= p->piece / 512 + 1024; }

/* With --split-blank-lines a part must not end or start inside a blank line (the rest of the
 * document is split again, and must find the blank lines the whole text has): no cut before a
 * newline, nor between two blanks. */
static int blank_ch(char c) { return c == '\n' || c == ' ' || c == '\t' || c == '\r'; }
static int cut_ok(void *ctx, const char *s, size_t n, size_t q) {
    (void)ctx;
    return q < n && s[q] != '\n' && !(blank_ch(s[q]) && blank_ch(s[q - 1]));
}

/* Tokenizes the first parts of a document doc[0..len) that is longer than half a piece (whole:
 * all of it; else what has been read of it) until what is left is at most half a piece: each
 * part is cut where its ids are those of the whole (mw_tokstream_cut), in parts of about half a
 * piece over the thread count, so that each thread encodes one, and flushed by half a piece, so
 * that doc's buffer is not held. Returns the bytes done. */
static size_t parts(prep *p, const char *doc, size_t len) {
    const size_t half = p->piece / 2, sub = half / (size_t)p->threads > 0 ? half / (size_t)p->threads : 1;
    size_t done = 0, round = 0; /* round: the bytes of parts in the batch, not yet flushed */
    while (len - done > half) {
        const size_t room = half - round;
        size_t c = 0;
        for (size_t max = sub < room ? sub : room;; max = room) { /* a part of sub bytes, else of all the room */
            if (mw_tokstream_cut(p->tok, doc + done, len - done, max, !p->in_doc,
                                 p->o->split_blank ? cut_ok : NULL, NULL, &c) != MW_OK)
                too_big(p, p->what, mw_last_error());
            if (c || max == room) break;
        }
        if (!c) {
            if (!round) too_big(p, p->what, NULL);
            flush_batch(p), round = 0; /* again with the whole of half a piece */
            continue;
        }
        add_doc(&p->d, doc + done, c, (p->in_doc ? DOC_REST : 0) | DOC_MORE);
        p->nparted += !p->in_doc;
        p->in_doc = 1;
        done += c, round += c;
        if (half - round < sub) flush_batch(p), round = 0;
    }
    if (round) flush_batch(p);
    return done;
}

/* mw_docs_feed's callback: a document into the batch, flushed as soon as it is full (the text
 * being fed stays: the batch holds only buffers of earlier reads, which it frees); a long one in
 * parts, and the rest of one whose first parts are done goes as its last part */
static void add_doc_cb(void *ctx, const char *doc, size_t len) {
    prep *p = ctx;
    const size_t done = parts(p, doc, len);
    add_doc(&p->d, doc + done, len - done, p->in_doc ? DOC_REST : 0);
    p->in_doc = 0;
    p->fresh = 1;
    if (batch_full(p)) flush_batch(p);
}

/* One input (path NULL: stdin), streamed a piece at a time: mw_docs_feed gives the whole
 * documents read so far to the batch, which is flushed when full; the rest waits for the next
 * read. Memory, in pieces: this buffer (what is not consumed, at most half a piece, and a piece:
 * 1.5), the next one's (1.5), the ids of half a piece of text being tokenized (4 bytes each, at
 * most one per byte, and up to twice that while the tokenizer's arrays grow: 4), the normalizer's
 * copies of that text (Llama 2's: 1 + 3 bytes a byte: 2; or mw_tokstream_cut's, at another
 * time), the word cache (1), the merging of words (1: the word limit is what it leaves a thread);
 * 11 of the 12. */
static void prep_input(prep *p, const char *path) {
    const char *what = path ? path : "stdin";
    FILE *f = path ? fopen(path, "rb") : stdin;
    if (!f && p->o->skip_unreadable && p->listed) {
        fprintf(stderr, "memwall: prepare: skipping %s: %s\n", path, strerror(errno));
        p->skipped++;
        return;
    }
    if (!f)
        die(1, "prepare: cannot open %s: %s%s", path, strerror(errno),
            p->listed ? " (--skip-unreadable skips the files of a directory or glob that cannot be opened, counting them)" : "");
    const size_t P = p->piece;
    mw_docs_stream ds = {p->o->split_blank, 0};
    p->what = what;
    size_t cap = P + 1, len = 0;
    char *buf = malloc(cap);
    if (!buf) die(1, "out of memory");
    for (;;) {
        if (len > P / 2) { /* what is read of a document, longer than half a piece: its first parts */
            const size_t done = parts(p, buf, len);
            memmove(buf, buf + done, len - done);
            len -= done;
        }
        if (len + P > cap) {
            char *nb = realloc(buf, cap = len + P);
            if (!nb) die(1, "out of memory");
            buf = nb;
        }
        const size_t got = read_some(f, buf + len, P, what);
        len += got;
        const int eof = got < P;
        if (eof && cap > len + 65536) { /* a small file's text: in a buffer of its size, so that a
                                           batch of many keeps no piece-sized buffer per file */
            char *nb = malloc(len ? len : 1);
            if (!nb) die(1, "out of memory");
            memcpy(nb, buf, len);
            free(buf);
            buf = nb;
        }
        const size_t used = mw_docs_feed(&ds, buf, len, eof, add_doc_cb, p);
        if (eof || used) { /* the batch keeps buf while its documents point into it */
            char *rest = NULL;
            if (!eof) {
                rest = malloc(len - used + P + 1);
                if (!rest) die(1, "out of memory");
                memcpy(rest, buf + used, len - used);
            }
            if (p->fresh) hold(p, buf), p->fresh = 0;
            else free(buf);
            if (eof) break;
            buf = rest, len -= used, cap = len + P + 1;
        }
    }
    if (path) fclose(f);
}

int cmd_prepare(int argc, char **argv) {
    opts o;
    parse(&o, CMD_PREPARE, "prepare", argc, argv);
    if (!o.n_in || !o.out) die(1, "prepare: --in TEXT|DIR|GLOB|- and --out PREFIX are required");
    if (!(o.val_fraction >= 0 && o.val_fraction < 1)) die(1, "--val-fraction must be in [0,1)");
    if (o.shard_tokens < 1024 || o.shard_tokens > (1ull << 40)) die(1, "--shard-tokens must be from 1024 to 2^40");
    const int explicit_shards = opt_given(&o, "shard-tokens");
    prep *p = calloc(1, sizeof *p);
    if (!p) die(1, "out of memory");
    p->o = &o;
    p->threads = mw_set_threads(o.cfg.threads);
    p->tok = open_tokenizer(&o, 0, NULL);
    /* what the tokenizer left of --memory, in twelve pieces (the header comment); big buffers are
     * mapped on their own, so that freeing them gives their memory back */
#if defined(__GLIBC__)
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
    const uint64_t base = mw_peak_rss(), floor = 10ull << 20;
    char b1[32], b2[32];
    if (o.prep_memory < base + floor)
        die(1, "prepare: --memory %s is too small: the tokenizer alone takes %s, and prepare needs %s more",
            mw_fmt_bytes(o.prep_memory, b1, sizeof b1), mw_fmt_bytes(base, b2, sizeof b2),
            mw_fmt_bytes(floor, (char[32]){0}, 32));
    p->piece = (size_t)((o.prep_memory - base) / 12);
    /* the word cache gets a piece; merging a word takes mw_tokenizer_word_cost bytes a byte on
     * each thread, within another piece */
    const size_t cost = mw_tokenizer_word_cost(p->tok);
    p->word_max = cost ? p->piece / (cost * (size_t)p->threads) : SIZE_MAX;
    mw_tokenizer_set_limits(p->tok, p->piece, p->word_max);
    mw_tokenizer_doc_ids(p->tok, &p->pre, &p->npre, &p->post, &p->npost, NULL);
    int vocab = mw_tokenizer_vocab(p->tok), width = vocab <= 65536 ? 2 : 4;
    mw_tokenizer_id tid;
    mw_tokenizer_identity(p->tok, &tid); /* recorded in every file */
    char mpath[4200], a1[128], a2[128];
    mw_manifest_path(o.out, mpath, sizeof mpath);
    mw_manifest set = {0};
    if (o.append) { /* the set must be one this tokenizer made */
        load_existing(o.out, mpath, &set);
        if (mw_tokenizer_id_conflict(&set.tok, &tid) || set.vocab != (uint32_t)vocab)
            die(1, "prepare --append: the set %s was made by tokenizer %s (vocabulary %u), --tokenizer is %s (%d)", o.out,
                mw_tokenizer_id_str(&set.tok, a1, sizeof a1), set.vocab, mw_tokenizer_id_str(&tid, a2, sizeof a2), vocab);
    }
    for (int k = 0; k < 2; k++)
        prep_s[k] = (stream){.prefix = o.out, .split = k ? "val" : "train", .vocab = (uint32_t)vocab, .width = width,
                             .per = o.shard_tokens, .tid = tid};
    atexit(prep_cleanup);
    signal(SIGINT, prep_signal), signal(SIGTERM, prep_signal), signal(SIGHUP, prep_signal);
    size_t nf;
    char *listed;
    char **files = list_inputs(&o, &nf, &p->total, &listed);
    progress_line pl; /* its policy: a terminal (--progress), or a line every MEMWALL_PROGRESS_SECONDS */
    progress_init(&pl, "prepare");
    p->tty = pl.tty, p->quiet = pl.quiet;
    p->t0 = p->last = now_s();
    p->every = pl.every;
    for (size_t i = 0; i < nf; i++) {
        p->listed = listed[i];
        prep_input(p, files[i]);
        free(files[i]);
    }
    free(files), free(listed);
    flush_batch(p);
    if (p->nstage) stream_append(&prep_s[0], p->stage, p->nstage);
    stream_close(&prep_s[0]);
    if (p->tty && !p->quiet) fprintf(stderr, "\n");
    const double enc_s = now_s() - p->t0;
    const char *in = o.n_in == 1 ? o.ins[0] : "the input";
    if (p->ndocs == 0) die(1, "prepare: %s is empty%s", in, p->skipped ? " (every file was skipped)" : "");
    uint64_t n = 0;
    for (size_t i = 0; i < prep_s[0].n; i++) n += prep_s[0].f[i].tokens;
    const uint64_t n_val = (uint64_t)(n * o.val_fraction);
    if (o.val_fraction > 0 && n_val < 2) die(1, "prepare: %s is too short for a validation part", in);
    cut_validation(p, n, n_val);
    stream *tr = &prep_s[0], *va = &prep_s[1];
    size_t ntrain = 0;
    while (ntrain < tr->n && tr->f[ntrain].tokens) ntrain++;
    const int single = !explicit_shards && !o.append && ntrain == 1 && va->n <= 1;
    char path[4300], tpath[4300], vpath[4300];
    snprintf(tpath, sizeof tpath, "%s.train.bin", o.out);
    snprintf(vpath, sizeof vpath, "%s.val.bin", o.out);
    if (single) {
        /* one file per split. What the prefix held goes first, its train file before all: a stop
         * in between leaves no set, or a manifest naming a missing shard, never a new train file
         * beside an old validation file or an old file read as a whole set */
        unlink(tpath);
        unlink(mpath);
        if (mw_sync_parent(mpath) != MW_OK) die(1, "%s", mw_last_error());
        if (va->n) rename_into(&va->f[0], vpath);
        else unlink(vpath); /* no validation part: none left from an earlier prepare */
        if (mw_sync_parent(vpath) != MW_OK) die(1, "%s", mw_last_error());
        rename_into(&tr->f[0], tpath);
        if (mw_sync_parent(tpath) != MW_OK) die(1, "%s", mw_last_error());
        remove_stale(o.out, NULL);
    } else { /* numbered shards, then the manifest, written last */
        if (!o.append) set = (mw_manifest){.vocab = (uint32_t)vocab, .width = width, .tok = tid};
        mw_manifest add = {0}; /* the new shards' names first, every one checked before anything changes */
        for (int k = 0; k < 2; k++) {
            stream *s = &prep_s[k];
            for (size_t i = 0, idx = (size_t)set.n[k]; i < s->n; i++) {
                if (!s->f[i].tokens) continue;
                if ((size_t)snprintf(path, sizeof path, "%s.%s.%03zu.bin", o.out, s->split, idx++) >= sizeof path)
                    die(1, "prepare: --out %.64s...: too long", o.out);
                const char *slash = strrchr(path, '/'), *file = slash ? slash + 1 : path;
                if (mw_manifest_add_shard(&add, k, file, s->f[i].tokens, s->f[i].crc) != MW_OK)
                    die(1, "prepare: --out %s cannot name the shards of a set: %s", o.out, mw_last_error());
                for (int q = 0; q < 2; q++)
                    for (int j = 0; j < set.n[q]; j++)
                        if (strcmp(set.shard[q][j].file, file) == 0)
                            die(1, "prepare --append: a new shard would be named %s, which the set already lists", file);
            }
        }
        if (!o.append) { /* the old set goes: its single files first, then its manifest */
            unlink(tpath), unlink(vpath), unlink(mpath);
            if (mw_sync_parent(mpath) != MW_OK) die(1, "%s", mw_last_error());
        }
        for (int k = 0; k < 2; k++) {
            stream *s = &prep_s[k];
            for (size_t i = 0, j = 0; i < s->n; i++) {
                if (!s->f[i].tokens) continue;
                const mw_set_shard *sh = &add.shard[k][j++];
                const char *slash = strrchr(o.out, '/');
                snprintf(path, sizeof path, "%.*s%s", slash ? (int)(slash - o.out) + 1 : 0, o.out, sh->file);
                rename_into(&s->f[i], path);
                if (mw_manifest_add_shard(&set, k, sh->file, sh->tokens, sh->crc) != MW_OK) die(1, "%s", mw_last_error());
            }
        }
        mw_manifest_free(&add);
        if (mw_sync_parent(mpath) != MW_OK) die(1, "%s", mw_last_error());
        const mw_set_part part = {p->ndocs, p->bytes, n - n_val, n_val};
        if (mw_manifest_add_part(&set, &part) != MW_OK || mw_manifest_write(&set, mpath) != MW_OK)
            die(1, "%s", mw_last_error());
        if (!o.append) remove_stale(o.out, &set);
    }
    const double mb = p->bytes / 1e6;
    char skipped[160] = "", where[8800];
    if (p->skipped) snprintf(skipped, sizeof skipped, " | %llu unreadable files skipped", (unsigned long long)p->skipped);
    if (p->nparted)
        snprintf(skipped + strlen(skipped), sizeof skipped - strlen(skipped), " | %llu document%s over %s in parts",
                 (unsigned long long)p->nparted, p->nparted == 1 ? "" : "s", mw_fmt_bytes(p->piece / 2, b1, sizeof b1));
    if (single) {
        snprintf(where, sizeof where, "%s.train.bin (%llu), %s.val.bin (%llu)", o.out, (unsigned long long)(n - n_val), o.out,
                 (unsigned long long)n_val);
    } else {
        uint64_t t[2] = {0, 0};
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < set.n[k]; i++) t[k] += set.shard[k][i].tokens;
        snprintf(where, sizeof where, "%s: train %llu in %d shard%s, val %llu in %d%s", mpath, (unsigned long long)t[0],
                 set.n[0], set.n[0] == 1 ? "" : "s", (unsigned long long)t[1], set.n[1],
                 o.append ? " (part added: train " : "");
        if (o.append)
            snprintf(where + strlen(where), sizeof where - strlen(where), "%llu, val %llu; the set's part %d)",
                     (unsigned long long)(n - n_val), (unsigned long long)n_val, set.nparts);
    }
    printf("prepare: %llu document%s, %.2f MB, %llu token%s (%.2f bytes/token) -> %s | "
           "tokenizer %s (vocab %d) | encoded at %.1f MB/s on %d thread%s, %.1f s in all | peak RSS %s of --memory %s%s\n",
           (unsigned long long)p->ndocs, p->ndocs == 1 ? "" : "s", mb, (unsigned long long)n, n == 1 ? "" : "s",
           n ? (double)p->bytes / n : 0.0, where, tid.name, vocab, enc_s > 0 ? mb / enc_s : 0.0, p->threads,
           p->threads == 1 ? "" : "s", enc_s, mw_fmt_bytes(mw_peak_rss(), b1, sizeof b1),
           mw_fmt_bytes(o.prep_memory, b2, sizeof b2), skipped);
    mw_manifest_free(&set);
    for (int k = 0; k < 2; k++) free(prep_s[k].f), prep_s[k].f = NULL, prep_s[k].n = 0;
    free(p->held), free(p->d.text), free(p->d.len), free(p->d.rest), free(p->d.more);
    mw_tokenizer_free(p->tok);
    free(p);
    return 0;
}


/* ---- verify ------------------------------------------------------------------------------------ */

int cmd_verify(int argc, char **argv) {
    const char *target = NULL;
    if (argc > 0 && strncmp(argv[0], "--", 2) != 0) target = argv[0], argc--, argv++;
    opts o;
    parse(&o, CMD_VERIFY, "verify", argc, argv);
    if (o.data && target) die(1, "verify: give the set once (PREFIX, or --data PREFIX)");
    if (o.data) target = o.data;
    if (!target) die(1, "verify: PREFIX is required (memwall verify PREFIX, or a token file FILE.bin)");
    mw_data *d[2] = {NULL, NULL};
    const size_t tl = strlen(target);
    struct stat st;
    if (tl > 4 && strcmp(target + tl - 4, ".bin") == 0 && stat(target, &st) == 0) {
        if (mw_data_open(&d[0], target) != MW_OK) die(1, "%s", mw_last_error());
    } else {
        for (int k = 0; k < 2; k++)
            if (mw_data_open_set_lenient(&d[k], target, k ? "val" : "train") != MW_OK) die(1, "%s", mw_last_error());
        if (!d[0]) die(1, "verify: no token set at %s (neither %s.manifest.json nor %s.train.bin exists)", target, target, target);
    }
    int bad = 0, shards = 0, unchecked = 0;
    uint64_t bytes = 0, tokens = 0;
    const double t0 = now_s();
    for (int k = 0; k < 2; k++) {
        for (int i = 0; d[k] && i < mw_data_shards(d[k]); i++, shards++) {
            uint64_t b = 0;
            const int v = mw_data_version(d[k]);
            if (mw_data_verify_shard(d[k], i, &b) != MW_OK) {
                printf("  BAD  %s\n", mw_last_error());
                bad++;
            } else {
                printf("  ok   %s  %llu tokens%s\n", mw_data_shard_path(d[k], i),
                       (unsigned long long)mw_data_shard_count(d[k], i),
                       v < 3 ? "  (version 1 or 2: no block checksums; the header, size and vocabulary checked)" : "");
                unchecked += v < 3;
            }
            bytes += b, tokens += mw_data_shard_count(d[k], i);
        }
    }
    const double secs = now_s() - t0;
    char b1[32];
    if (bad) {
        fflush(stdout);
        die(1, "verify: %s: %d of %d shard%s damaged (named above); prepare the set again, or restore those files", target,
            bad, shards, shards == 1 ? "" : "s");
    }
    printf("verify: %s: %d shard%s, %llu tokens, %s read in %.1f s: %s\n", target, shards, shards == 1 ? "" : "s",
           (unsigned long long)tokens, mw_fmt_bytes(bytes, b1, sizeof b1), secs,
           unchecked ? "readable, but without block checksums (prepare it again to add them)"
                     : "every block matches its checksum");
    mw_data_close(d[0]), mw_data_close(d[1]);
    return 0;
}
