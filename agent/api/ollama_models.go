package api

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
)

// farFuture is Ollama's expires_at for a model kept loaded until deleted.
var farFuture = time.Date(2318, 1, 1, 0, 0, 0, 0, time.UTC)

// ollamaList is every model some node has (running false), or every
// running one (running true), in Ollama's list shape. Orrery has no
// digests or modification times for files: digest is "" and modified_at
// the zero time.
func (s *Server) ollamaList(running bool) []map[string]any {
	st := s.Store.State()
	infos := map[string]state.ModelInfo{}
	for _, nm := range st.NodeModels {
		for _, m := range nm.Models {
			if m.Error == "" {
				infos[m.ID] = m
			}
		}
	}
	entry := func(id string) map[string]any {
		m := infos[id]
		var size uint64
		if m.Size != nil {
			size = m.Size.InBytes
		}
		return map[string]any{"name": id, "model": id, "modified_at": time.Time{}.Format(time.RFC3339), "size": size, "digest": "",
			"details": map[string]any{"parent_model": "", "format": "gguf", "family": m.Arch, "families": []string{m.Arch},
				"parameter_size": paramSize(m.Params), "quantization_level": m.Quantization}}
	}
	var out []map[string]any
	if !running {
		for id := range infos {
			out = append(out, entry(id))
		}
	} else {
		for _, in := range st.Instances {
			if in.Status == state.InstanceStatusFailed {
				continue
			}
			e := entry(in.ModelID)
			exp := farFuture
			switch {
			case in.ExpiresAt != nil:
				exp = *in.ExpiresAt
			case !in.Pinned:
				exp = time.Now().Add(time.Duration(in.KeepAliveMs) * time.Millisecond) // busy: the clock starts when it idles
			}
			e["expires_at"] = exp.UTC().Format(time.RFC3339Nano)
			e["size_vram"] = 0 // ranks run on CPU here; Metal's share is not reported yet
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b map[string]any) int { return strings.Compare(a["name"].(string), b["name"].(string)) })
	if out == nil {
		out = []map[string]any{}
	}
	return out
}

// paramSize writes a parameter count as Ollama does ("1.2B", "135M").
func paramSize(n uint64) string {
	switch {
	case n == 0:
		return ""
	case n >= 1e9:
		return fmt.Sprintf("%.1fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.0fM", float64(n)/1e6)
	}
	return fmt.Sprintf("%.0fK", float64(n)/1e3)
}
