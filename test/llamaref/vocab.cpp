// orrery-llama-vocab: Orrery's probe into llama.cpp's tokenizer (our code,
// linked against the prebuilt libllama that scripts/llama-ref.sh installs).
//
// It loads a model's vocabulary only, reads test cases from FILE (separated
// by "\n__ggml_vocab_test__\n", as llama.cpp's .inp files are), and prints
// one line per case: the ids (add_special and parse_special as asked,
// space-separated), a tab, and the hex bytes of llama_detokenize of those
// ids (remove_special false, unparse_special true, as common_detokenize).
//
//   orrery-llama-vocab -m MODEL -f FILE [-add-special] [-parse-special]
//
// With -eog instead of -f it prints the ids of the tokens that end
// generation (llama_vocab_is_eog), ascending, space-separated, on one line.
//
//   orrery-llama-vocab -m MODEL -eog
#include "llama.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char ** argv) {
    std::string model_path, cases_path;
    bool add_special = false, parse_special = false, eog = false;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "-m" && i + 1 < argc) model_path = argv[++i];
        else if (a == "-f" && i + 1 < argc) cases_path = argv[++i];
        else if (a == "-add-special") add_special = true;
        else if (a == "-parse-special") parse_special = true;
        else if (a == "-eog") eog = true;
        else { fprintf(stderr, "usage: orrery-llama-vocab -m MODEL (-f FILE [-add-special] [-parse-special] | -eog)\n"); return 2; }
    }
    if (model_path.empty() || (cases_path.empty() && !eog)) { fprintf(stderr, "usage: orrery-llama-vocab -m MODEL (-f FILE | -eog)\n"); return 2; }
    llama_log_set([](enum ggml_log_level level, const char * text, void *) {
        if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
    }, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) { fprintf(stderr, "load %s failed\n", model_path.c_str()); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    if (eog) {
        bool first = true;
        for (llama_token id = 0; id < llama_vocab_n_tokens(vocab); id++) {
            if (llama_vocab_is_eog(vocab, id)) { printf("%s%d", first ? "" : " ", id); first = false; }
        }
        printf("\n");
        llama_model_free(model);
        return 0;
    }

    std::ifstream in(cases_path, std::ios::binary);
    if (!in) { fprintf(stderr, "open %s failed\n", cases_path.c_str()); return 1; }
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string all = ss.str();
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> cases;
    for (size_t pos = 0; pos < all.size();) { // as test-tokenizer-0 reads them
        size_t next = all.find(sep, pos);
        if (next == std::string::npos) { cases.push_back(all.substr(pos)); break; }
        cases.push_back(all.substr(pos, next - pos));
        pos = next + sep.size();
    }

    for (const auto & c : cases) {
        int n = -llama_tokenize(vocab, c.data(), (int32_t) c.size(), nullptr, 0, add_special, parse_special);
        std::vector<llama_token> ids(n > 0 ? n : 0);
        if (n > 0) llama_tokenize(vocab, c.data(), (int32_t) c.size(), ids.data(), n, add_special, parse_special);
        for (size_t i = 0; i < ids.size(); i++) printf("%s%d", i ? " " : "", ids[i]);
        printf("\t");
        std::vector<char> text(c.size() * 4 + 64);
        int m = llama_detokenize(vocab, ids.data(), (int32_t) ids.size(), text.data(), (int32_t) text.size(), false, true);
        if (m < 0) {
            text.resize(-m);
            m = llama_detokenize(vocab, ids.data(), (int32_t) ids.size(), text.data(), (int32_t) text.size(), false, true);
        }
        for (int i = 0; i < m; i++) printf("%02x", (unsigned char) text[i]);
        printf("\n");
    }
    llama_model_free(model);
    return 0;
}
