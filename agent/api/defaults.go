package api

import (
	"slices"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// A model's own generation settings (an Ollama model's params layer, as
// state.ModelInfo.Defaults) fill what a request leaves unset, as Ollama
// applies a Modelfile's PARAMETERs: in every protocol.

// setFields says which generation settings a request gave itself.
type setFields struct{ temperature, topP, topK, stop, maxTokens bool }

// defaultable is a completionBody that says which settings it set.
type defaultable interface{ set() setFields }

func (c *chatRequest) set() setFields {
	return setFields{c.Temperature != nil, c.TopP != nil, c.TopK != nil, given(c.Stop), c.MaxTokens != nil || c.MaxCompletionTokens != nil}
}

func (c *completionRequest) set() setFields {
	return setFields{c.Temperature != nil, c.TopP != nil, c.TopK != nil, given(c.Stop), c.MaxTokens != nil}
}

func (a *anthropicRequest) set() setFields {
	return setFields{a.Temperature != nil, a.TopP != nil, a.TopK != nil, len(a.StopSequences) > 0, true}
}

func (c *ollamaCommon) set() setFields {
	o := c.Options
	if o == nil {
		return setFields{}
	}
	return setFields{o.Temperature != nil, o.TopP != nil, o.TopK != nil, len(o.Stop) > 0, o.NumPredict != nil && *o.NumPredict > 0}
}

func given(raw []byte) bool { return len(raw) > 0 && string(raw) != "null" }

// withDefaults is req with the settings body left unset taken from its
// model's defaults; defaults that would make it invalid are not used.
func (s *Server) withDefaults(body completionBody, req runnerapi.Request) runnerapi.Request {
	b, ok := body.(defaultable)
	d := s.modelDefaults(body.modelID())
	if !ok || d == nil {
		return req
	}
	set, out := b.set(), req
	if !set.temperature && d.Temperature != nil {
		out.Sample.Temperature = *d.Temperature
	}
	if !set.topP && d.TopP != nil {
		out.Sample.TopP = *d.TopP
	}
	if !set.topK && d.TopK != nil {
		out.Sample.TopK = *d.TopK
	}
	if !set.stop && len(d.Stop) > 0 {
		out.Stop = d.Stop[:min(len(d.Stop), runnerapi.MaxStop)]
	}
	if !set.maxTokens && d.NumPredict != nil && *d.NumPredict > 0 {
		out.MaxTokens = *d.NumPredict
	}
	if out.Validate() != nil {
		return req
	}
	return out
}

// modelDefaults are a model's defaults as a node lists them: this one
// first, then the others by id.
func (s *Server) modelDefaults(id string) *state.ModelDefaults {
	st := s.Store.State()
	nodes := make([]string, 0, len(st.NodeModels))
	for n := range st.NodeModels {
		if n != s.NodeID {
			nodes = append(nodes, n)
		}
	}
	slices.Sort(nodes)
	for _, n := range append([]string{s.NodeID}, nodes...) {
		for _, m := range st.NodeModels[n].Models {
			if m.ID == id && m.Defaults != nil {
				return m.Defaults
			}
		}
	}
	return nil
}
