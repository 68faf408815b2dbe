// orrery-llama-logits: Orrery's reference probe into llama.cpp (our code,
// linked against the prebuilt libllama that scripts/llama-ref.sh installs).
//
// It feeds token ids to a model, teacher-forced, keeps the logits at every
// position, then continues greedily for -n tokens. The logits go to -o as
// float32 rows (little-endian, n_vocab per row): one row per prompt position,
// then one per generated token but the last (the row that predicted it).
// stdout gets one JSON line: {"nVocab":N,"nPrompt":P,"generated":[ids]}.
//
//   orrery-llama-logits -m MODEL -p "1,2,3" [-n 32] [-t threads] [-c ctx] [-kv f16|f32] [-fa on|off] [-repack on|off] -o FILE
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static void usage() {
    fprintf(stderr, "usage: orrery-llama-logits -m MODEL -p IDS(comma-separated) -o FILE [-n GEN] [-t THREADS] [-c CTX] [-kv f16|f32] [-fa on|off] [-repack on|off]\n");
    exit(2);
}

int main(int argc, char ** argv) {
    std::string model_path, ids_arg, out_path, kv = "f16", fa = "on", repack = "on";
    int n_gen = 0, n_threads = 2, n_ctx = 0;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (i + 1 >= argc) usage();
        if (a == "-m") model_path = argv[++i];
        else if (a == "-p") ids_arg = argv[++i];
        else if (a == "-o") out_path = argv[++i];
        else if (a == "-n") n_gen = atoi(argv[++i]);
        else if (a == "-t") n_threads = atoi(argv[++i]);
        else if (a == "-c") n_ctx = atoi(argv[++i]);
        else if (a == "-kv") kv = argv[++i];
        else if (a == "-fa") fa = argv[++i];
        else if (a == "-repack") repack = argv[++i];
        else usage();
    }
    if (model_path.empty() || ids_arg.empty() || out_path.empty()) usage();

    std::vector<llama_token> prompt;
    for (const char * s = ids_arg.c_str(); *s;) {
        char * end;
        long v = strtol(s, &end, 10);
        if (end == s) { fprintf(stderr, "bad id list at %s\n", s); return 2; }
        prompt.push_back((llama_token) v);
        s = *end == ',' ? end + 1 : end;
    }

    llama_log_set([](enum ggml_log_level level, const char * text, void *) {
        if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
    }, nullptr);
    llama_backend_init();
    ggml_backend_load_all();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.load_mode = LLAMA_LOAD_MODE_NONE;
    // Repacked weights (ggml-cpu's extra buffer types) change the
    // kernels, and with them the rounding of quantized types.
    if (repack != "on" && repack != "off") usage();
    mp.use_extra_bufts = repack == "on";
    llama_model * model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) { fprintf(stderr, "load %s failed\n", model_path.c_str()); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    llama_context_params cp = llama_context_default_params();
    int need = (int) prompt.size() + n_gen + 1;
    cp.n_ctx = n_ctx > 0 ? n_ctx : need;
    cp.n_batch = cp.n_ctx;
    cp.n_ubatch = cp.n_ctx;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    cp.no_perf = true;
    if (kv != "f16" && kv != "f32") usage();
    if (fa != "on" && fa != "off") usage();
    cp.type_k = cp.type_v = kv == "f32" ? GGML_TYPE_F32 : GGML_TYPE_F16;
    cp.flash_attn_type = fa == "on" ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "context failed\n"); return 1; }

    FILE * out = fopen(out_path.c_str(), "wb");
    if (!out) { fprintf(stderr, "open %s failed\n", out_path.c_str()); return 1; }

    llama_batch batch = llama_batch_init((int) prompt.size(), 0, 1);
    for (size_t i = 0; i < prompt.size(); i++) {
        batch.token[i] = prompt[i];
        batch.pos[i] = (llama_pos) i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = (int) prompt.size();
    if (llama_decode(ctx, batch) != 0) { fprintf(stderr, "decode failed\n"); return 1; }
    for (int i = 0; i < batch.n_tokens; i++) {
        fwrite(llama_get_logits_ith(ctx, i), sizeof(float), n_vocab, out);
    }
    llama_batch_free(batch);

    std::vector<llama_token> gen;
    const float * last = llama_get_logits_ith(ctx, -1);
    llama_pos pos = (llama_pos) prompt.size();
    for (int g = 0; g < n_gen; g++) {
        int best = 0;
        for (int v = 1; v < n_vocab; v++) if (last[v] > last[best]) best = v;
        gen.push_back(best);
        if (g + 1 == n_gen) break;
        llama_batch one = llama_batch_init(1, 0, 1);
        one.token[0] = best; one.pos[0] = pos++; one.n_seq_id[0] = 1; one.seq_id[0][0] = 0; one.logits[0] = 1;
        one.n_tokens = 1;
        if (llama_decode(ctx, one) != 0) { fprintf(stderr, "decode failed\n"); return 1; }
        last = llama_get_logits_ith(ctx, -1);
        fwrite(last, sizeof(float), n_vocab, out);
        llama_batch_free(one);
    }
    if (fclose(out) != 0) { fprintf(stderr, "write %s failed\n", out_path.c_str()); return 1; }

    printf("{\"nVocab\":%d,\"nPrompt\":%zu,\"generated\":[", n_vocab, prompt.size());
    for (size_t i = 0; i < gen.size(); i++) printf("%s%d", i ? "," : "", gen[i]);
    printf("]}\n");
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
