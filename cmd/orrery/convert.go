package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/orrery-cluster/orrery/engine/model"
)

const convertUsage = `Usage: orrery convert [--type T] IN.safetensors OUT.gguf

Writes trained llama-architecture weights, as models/kjv/train.py saves
them (GGUF tensor names and layout in safetensors, the shape and the
SentencePiece vocabulary in its metadata), as a GGUF model: the metadata
gen-model writes for that shape, the file's vocabulary, and a chat template
that has the model continue the text (these are base models). Other types
(Q4_K_M, …) come from llama-quantize on the F32 or F16 file.

Flags:
`

// runConvert runs "orrery convert". Exit status: 0 done, 1 failed, 2 usage.
func runConvert(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orrery convert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), convertUsage)
		fs.PrintDefaults()
	}
	typ := fs.String("type", "F16", "weight type: F32, F16, BF16, Q8_0 or Q4_0 (norms stay F32)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 2 {
		fmt.Fprintf(stderr, "orrery convert: want IN.safetensors OUT.gguf, got %d arguments\n", fs.NArg())
		return 2
	}
	in, out := fs.Arg(0), fs.Arg(1)
	if err := model.Convert(in, out, strings.ToUpper(*typ)); err != nil {
		fmt.Fprintf(stderr, "orrery convert: %v\n", err)
		return 1
	}
	fi, err := os.Stat(out)
	if err != nil {
		fmt.Fprintf(stderr, "orrery convert: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s (%s)\n", out, humanBytes(fi.Size()))
	return 0
}
