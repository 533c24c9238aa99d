/*
 * tokenizer/spm_shim.cc - extern "C" wrappers over sentencepiece::SentencePieceProcessor; the
 * project's one C++ file (see spm_shim.h for the contract).
 *
 * Why a shim: the rest of the project is C11, and the library speaks C++ (std::string,
 * std::vector, util::Status, exceptions). Each entry point here is a try/catch around a few
 * library calls: library statuses become PL_TOK_SPM_* codes with the status text copied into
 * the caller's buffer, std::bad_alloc becomes PL_TOK_SPM_NOMEM, and anything else (protobuf
 * throws google::protobuf::FatalException from its CHECKs) becomes PL_TOK_SPM_FAILED, so no
 * exception unwinds into C frames. The library allocates with operator new internally; only
 * the arrays handed back to C come from pl_malloc.
 */
#include "tokenizer/spm_shim.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "util/alloc.h"

struct pl_tok_spm {
    sentencepiece::SentencePieceProcessor sp;
    int n_pieces;
};

// ---- helpers --------------------------------------------------------------------------------

static void set_err(char *err, size_t cap, const char *msg) {
    if (!err || cap == 0) return;
    std::snprintf(err, cap, "%s", msg ? msg : "");
}

static int from_status(const sentencepiece::util::Status &st, int code, char *err, size_t cap) {
    if (st.ok()) return PL_TOK_SPM_OK;
    set_err(err, cap, st.ToString().c_str());
    return code;
}

// Runs body, mapping exceptions to codes: the single place that decides what a throw means.
template <typename F> static int guarded(char *err, size_t cap, F body) {
    try {
        return body();
    } catch (const std::bad_alloc &) {
        set_err(err, cap, "out of memory inside sentencepiece");
        return PL_TOK_SPM_NOMEM;
    } catch (const std::exception &e) {
        set_err(err, cap, e.what());
        return PL_TOK_SPM_FAILED;
    } catch (...) {
        set_err(err, cap, "unknown C++ exception inside sentencepiece");
        return PL_TOK_SPM_FAILED;
    }
}

// ---- loading --------------------------------------------------------------------------------

extern "C" int pl_tok_spm_load(const void *bytes, size_t n_bytes, pl_tok_spm **out, char *err,
                               size_t err_cap) {
    return guarded(err, err_cap, [&]() -> int {
        pl_tok_spm *s = new (std::nothrow) pl_tok_spm();
        if (!s) {
            set_err(err, err_cap, "out of memory");
            return PL_TOK_SPM_NOMEM;
        }
        try {
            std::string_view blob(static_cast<const char *>(bytes), n_bytes);
            int rc = from_status(s->sp.LoadFromSerializedProto(blob), PL_TOK_SPM_FORMAT, err,
                                 err_cap);
            if (rc == PL_TOK_SPM_OK) {
                s->n_pieces = s->sp.GetPieceSize();
                if (s->n_pieces <= 0) {
                    set_err(err, err_cap, "the model has no pieces");
                    rc = PL_TOK_SPM_FORMAT;
                }
            }
            if (rc != PL_TOK_SPM_OK) {
                delete s;
                return rc;
            }
        } catch (...) {
            delete s;
            throw;
        }
        *out = s;
        return PL_TOK_SPM_OK;
    });
}

extern "C" void pl_tok_spm_free(pl_tok_spm *s) {
    try {
        delete s;
    } catch (...) {
        // A destructor that throws leaves nothing for C to do; swallowing it keeps C frames
        // free of unwinding.
    }
}

// ---- vocabulary -----------------------------------------------------------------------------

extern "C" int pl_tok_spm_piece_count(const pl_tok_spm *s) { return s->n_pieces; }

extern "C" int pl_tok_spm_bos_id(const pl_tok_spm *s) {
    try {
        int id = s->sp.bos_id();
        return id >= 0 && id < s->n_pieces ? id : -1;
    } catch (...) {
        return -1;
    }
}

extern "C" int pl_tok_spm_eos_id(const pl_tok_spm *s) {
    try {
        int id = s->sp.eos_id();
        return id >= 0 && id < s->n_pieces ? id : -1;
    } catch (...) {
        return -1;
    }
}

extern "C" const char *pl_tok_spm_piece(const pl_tok_spm *s, int id, size_t *out_len,
                                        int *out_kind) {
    if (id < 0 || id >= s->n_pieces) return nullptr;
    try {
        const std::string &p = s->sp.IdToPiece(id);
        int kind = PL_TOK_SPM_NORMAL;
        if (s->sp.IsControl(id))
            kind = PL_TOK_SPM_CONTROL;
        else if (s->sp.IsUnknown(id))
            kind = PL_TOK_SPM_UNKNOWN;
        else if (s->sp.IsByte(id))
            kind = PL_TOK_SPM_BYTE;
        *out_len = p.size();
        *out_kind = kind;
        return p.data();
    } catch (...) {
        return nullptr;
    }
}

extern "C" float pl_tok_spm_score(const pl_tok_spm *s, int id) {
    if (id < 0 || id >= s->n_pieces) return 0.0f;
    try {
        return s->sp.GetScore(id);
    } catch (...) {
        return 0.0f;
    }
}

// ---- encode / decode ------------------------------------------------------------------------

extern "C" int pl_tok_spm_encode(const pl_tok_spm *s, const char *text, size_t len,
                                 int32_t bos_id, int32_t **out_ids, size_t *out_n, char *err,
                                 size_t err_cap) {
    return guarded(err, err_cap, [&]() -> int {
        std::vector<int> ids;
        int rc = from_status(s->sp.Encode(std::string_view(text, len), &ids), PL_TOK_SPM_FAILED,
                             err, err_cap);
        if (rc != PL_TOK_SPM_OK) return rc;
        size_t n = ids.size() + (bos_id >= 0 ? 1 : 0);
        int32_t *arr = static_cast<int32_t *>(pl_reallocarray(nullptr, n, sizeof *arr));
        if (!arr) {
            set_err(err, err_cap, "out of memory");
            return PL_TOK_SPM_NOMEM;
        }
        size_t k = 0;
        if (bos_id >= 0) arr[k++] = bos_id;
        for (int id : ids) arr[k++] = id;
        *out_ids = arr;
        *out_n = n;
        return PL_TOK_SPM_OK;
    });
}

extern "C" int pl_tok_spm_decode(const pl_tok_spm *s, const int32_t *ids, size_t n,
                                 char **out_text, size_t *out_len, char *err, size_t err_cap) {
    return guarded(err, err_cap, [&]() -> int {
        std::vector<int> v(ids, ids + n);
        for (size_t i = 0; i < n; i++) {
            if (v[i] < 0 || v[i] >= s->n_pieces) {
                char msg[96];
                std::snprintf(msg, sizeof msg, "ids[%zu] = %d is outside [0, %d)", i, v[i],
                              s->n_pieces);
                set_err(err, err_cap, msg);
                return PL_TOK_SPM_INVALID;
            }
        }
        std::string text;
        int rc = from_status(s->sp.Decode(v, &text), PL_TOK_SPM_FAILED, err, err_cap);
        if (rc != PL_TOK_SPM_OK) return rc;
        char *buf = static_cast<char *>(pl_malloc(text.size() + 1));
        if (!buf) {
            set_err(err, err_cap, "out of memory");
            return PL_TOK_SPM_NOMEM;
        }
        std::memcpy(buf, text.data(), text.size());
        buf[text.size()] = '\0';
        *out_text = buf;
        *out_len = text.size();
        return PL_TOK_SPM_OK;
    });
}
