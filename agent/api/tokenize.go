package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"unicode/utf8"
)

// POST /tokenize and POST /detokenize, in llama.cpp server's shapes plus
// a model id: any node answers, on the model's vocabulary read from its
// GGUF header, forwarding to a node that has the file when it lacks it.

// tokenizeRequest is llama.cpp's /tokenize body plus the model.
type tokenizeRequest struct {
	Model      string `json:"model"`
	Content    string `json:"content"`
	AddSpecial bool   `json:"add_special"`
	WithPieces bool   `json:"with_pieces"`
}

// detokenizeRequest is llama.cpp's /detokenize body plus the model.
type detokenizeRequest struct {
	Model  string  `json:"model"`
	Tokens []int32 `json:"tokens"`
}

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request, forwarded bool) {
	var req tokenizeRequest
	v, ok := s.vocabFor(w, r, forwarded, "/tokenize", &req, func() string { return req.Model })
	if !ok {
		return
	}
	ids, err := v.Encode(req.Content, req.AddSpecial)
	if err != nil {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value", "tokenize: "+err.Error())
		return
	}
	if ids == nil {
		ids = []int32{}
	}
	if !req.WithPieces {
		writeJSON(w, http.StatusOK, TokenIDs{Tokens: ids})
		return
	}
	out := make([]TokenPiece, len(ids))
	for i, id := range ids {
		p, err := v.Decode([]int32{id})
		if err != nil {
			openAIError(w, http.StatusInternalServerError, "server_error", "decode", fmt.Sprintf("decode token %d: %v", id, err))
			return
		}
		out[i] = TokenPiece{ID: id, Piece: pieceJSON(p)}
	}
	writeJSON(w, http.StatusOK, TokenPieces{Tokens: out})
}

// pieceJSON is a token's text as llama.cpp's with_pieces gives it: a
// string when valid UTF-8, else an array of its bytes.
func pieceJSON(p string) json.RawMessage {
	var v any = p
	if !utf8.ValidString(p) {
		b := make([]int, len(p))
		for i := range len(p) {
			b[i] = int(p[i])
		}
		v = b
	}
	raw, _ := json.Marshal(v) // a string or []int always marshals
	return raw
}

func (s *Server) detokenize(w http.ResponseWriter, r *http.Request, forwarded bool) {
	var req detokenizeRequest
	v, ok := s.vocabFor(w, r, forwarded, "/detokenize", &req, func() string { return req.Model })
	if !ok {
		return
	}
	n := v.VocabSize()
	for i, id := range req.Tokens {
		if id < 0 || int(id) >= n {
			openAIError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value",
				fmt.Sprintf("tokens[%d] is %d: want 0..%d", i, id, n-1))
			return
		}
	}
	text := ""
	if len(req.Tokens) > 0 {
		var err error
		if text, err = v.Decode(req.Tokens); err != nil {
			openAIError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value", "detokenize: "+err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, Detokenized{Content: text})
}

// vocabFor reads a JSON body into req, finds a node with the model's file
// and either forwards the request there (answering it) or returns this
// node's vocabulary. ok is false when the request was answered.
func (s *Server) vocabFor(w http.ResponseWriter, r *http.Request, forwarded bool, path string, req any, modelOf func() string) (v Vocab, ok bool) {
	if s.Inference == nil {
		openAIError(w, http.StatusNotFound, "invalid_request_error", "not_found", "this node serves no models")
		return nil, false
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			openAIError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "body_too_large", fmt.Sprintf("body over %d bytes", mbe.Limit))
			return nil, false
		}
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "invalid_body", "read body: "+err.Error())
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", path+" body: "+err.Error())
		return nil, false
	}
	model := modelOf()
	if model == "" {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value", "model is required")
		return nil, false
	}
	if !forwarded {
		node, err := s.Inference.PickNode(model)
		if err != nil {
			inferenceError(w, err)
			return nil, false
		}
		if node != s.NodeID {
			s.forward(w, r, node, path, body)
			return nil, false
		}
	}
	v, err = s.Inference.Vocab(model)
	if err != nil {
		inferenceError(w, err)
		return nil, false
	}
	return v, true
}
