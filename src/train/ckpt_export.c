/* A checkpoint file exported as Hugging Face weights (memwall export --ckpt): reads the
 * checkpoint's tensor index (checkpoint.h), checks it against its configuration, and hands the
 * tensors, read in place from the file, to the safetensors writer of src/model/hf.c
 * (mw_hf_export_tensors). It lives here, beside the checkpoint format, so that src/model/ never
 * reads that format (the arrow runs train -> model, never back); its functions keep the public
 * API's names, mw_hf_export_ckpt and mw_hf_export_ckpt_tokenizer (memwall.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/status.h"
#include "../model/hf.h"
#include "checkpoint.h"

mw_status mw_hf_export_ckpt(const char *ckpt, const char *out) { return mw_hf_export_ckpt_tokenizer(ckpt, out, NULL); }

mw_status mw_hf_export_ckpt_tokenizer(const char *ckpt, const char *out, const char *tokenizer) {
    mw_ckpt_index idx = {0, calloc(MW_CKPT_MAX_INDEX, sizeof(mw_ckpt_entry))};
    mw_hf_src_tensor *t = calloc(MW_CKPT_MAX_INDEX, sizeof *t);
    mw_ckpt_info info;
    mw_status s = idx.e && t ? mw_ckpt_index_read(ckpt, &info, &idx) : mw_fail(MW_ERR_NOMEM, "out of memory");
    int fd = -1;
    if (s == MW_OK && (fd = open(ckpt, O_RDONLY | O_CLOEXEC)) < 0)
        s = mw_fail(MW_ERR_IO, "cannot open %s: %s", ckpt, strerror(errno));
    /* the checkpoint's tensor table must be exactly the one its configuration implies */
    for (int i = 0; s == MW_OK && i < idx.n; i++) {
        char name[256];
        int nd, dims[2];
        s = mw_config_tensor(&info.cfg, i, name, sizeof name, &nd, dims);
        if (s == MW_OK && (strcmp(name, idx.e[i].name) != 0 || nd != idx.e[i].ndim || dims[0] != idx.e[i].dims[0] ||
                           (nd == 2 && dims[1] != idx.e[i].dims[1])))
            s = mw_fail(MW_ERR_FORMAT, "%s: tensor record %d (%s) does not match its configuration", ckpt, i,
                        idx.e[i].name);
    }
    const int want = info.cfg.arch == MW_ARCH_LLAMA      ? 2 + 9 * info.cfg.n_layer + !info.cfg.tied
                     : info.cfg.arch == MW_ARCH_DEEPSEEK ? mw_deepseek_tensor_count(&info.cfg)
                                                         : 4 + 12 * info.cfg.n_layer;
    if (s == MW_OK && idx.n != want)
        s = mw_fail(MW_ERR_FORMAT, "%s: %d tensors, its configuration has %d", ckpt, idx.n, want);
    if (s == MW_OK) {
        for (int i = 0; i < idx.n; i++)
            t[i] = (mw_hf_src_tensor){idx.e[i].name, idx.e[i].ndim, {idx.e[i].dims[0], idx.e[i].dims[1]}, NULL,
                                idx.e[i].offset};
        mw_hf_tokfiles tf;
        if (tokenizer) s = mw_hf_tokfiles_resolve(tokenizer, &info.cfg.tokenizer, info.cfg.vocab, &tf);
        if (s == MW_OK) s = mw_hf_export_tensors(t, idx.n, out, fd, ckpt, &info.cfg, tokenizer ? &tf : NULL);
    }
    if (fd >= 0) close(fd);
    free(idx.e);
    free(t);
    return s;
}
