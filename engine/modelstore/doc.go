// Package modelstore finds the GGUF models kept on this machine and
// deletes them: Orrery's own folder, Ollama's store (manifests and blobs),
// LM Studio's folder and the Hugging Face hub cache. A Scanner lists each
// file as an Entry, described from its header by engine/model (the
// model's shape) and engine/tokenizer (its vocabulary and template), with
// the reason when it cannot run here; Remove deletes a model as the
// store's own tool would.
package modelstore
