package modelstore

import (
	"regexp"
	"testing"
)

var blobName = regexp.MustCompile(`^sha256-[0-9a-f]{64}$`)

// A manifest yields a blob name of exactly one shape, or an error: no
// digest from a file ever becomes another path.
func FuzzOllamaManifest(f *testing.F) {
	f.Add(`{"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:` + "abababababababababababababababababababababababababababababababab" + `"}]}`)
	f.Add(`{"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:../../etc/passwd"}]}`)
	f.Add(`{"layers":[]}`)
	f.Fuzz(func(t *testing.T, s string) {
		name, err := parseOllamaManifest([]byte(s))
		if err == nil && !blobName.MatchString(name) {
			t.Fatalf("blob name %q", name)
		}
	})
}
