package api

import "net/http"

// embeddingsMissing is what the embedding routes answer until Orrery
// computes embeddings: a clear 501 in each protocol's own shape, rather
// than "no such endpoint", so that a RAG client's error says what is
// missing.
const embeddingsMissing = "Orrery does not compute embeddings yet: no model here serves /v1/embeddings, /api/embed or /api/embeddings (chat and completions only)"

func (s *Server) openAIEmbeddings(w http.ResponseWriter, r *http.Request) {
	openAIError(w, http.StatusNotImplemented, "invalid_request_error", "not_implemented", embeddingsMissing)
}

func (s *Server) ollamaEmbed(w http.ResponseWriter, r *http.Request) {
	ollamaError(w, http.StatusNotImplemented, embeddingsMissing)
}
