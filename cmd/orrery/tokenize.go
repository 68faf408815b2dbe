package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/agent/api/client"
)

// tokenizeTimeout bounds the request (a cold vocabulary load included).
const tokenizeTimeout = time.Minute

const tokenizeUsage = `Usage: orrery tokenize --model ID [--api URL] [--ids|--pieces] [--no-special] TEXT|-

Tokenizes TEXT ("-": standard input) with the vocabulary of model ID, as a
running agent's POST /tokenize does (any node answers: it forwards to one
that has the model's file). It prints one token per line, its id and its
piece (JSON-quoted; a piece that is not valid UTF-8 as its bytes), then the
count. The beginning-of-sequence token is added as a completion would see
it unless --no-special.

Flags:
`

func runTokenize(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	const name = "orrery tokenize"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, tokenizeUsage); fs.PrintDefaults() }
	apiURL := fs.String("api", client.DefaultBaseURL, "API URL of the agent")
	modelID := fs.String("model", "", "model id (see GET /v1/models)")
	idsOnly := fs.Bool("ids", false, "print only the ids, space-separated on one line")
	piecesOnly := fs.Bool("pieces", false, "print only the pieces, one JSON value per line")
	noSpecial := fs.Bool("no-special", false, "do not add the beginning-of-sequence token")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case *modelID == "":
		fmt.Fprintf(stderr, "%s: --model is required\n\n%s", name, tokenizeUsage)
		return 2
	case len(pos) != 1:
		fmt.Fprintf(stderr, "%s: want one TEXT argument (- for stdin), got %d\n\n%s", name, len(pos), tokenizeUsage)
		return 2
	case *idsOnly && *piecesOnly:
		fmt.Fprintf(stderr, "%s: --ids and --pieces exclude each other\n", name)
		return 2
	}
	text := pos[0]
	if text == "-" {
		b, err := io.ReadAll(io.LimitReader(stdin, 1<<20+1))
		if err != nil {
			fmt.Fprintf(stderr, "%s: read stdin: %v\n", name, err)
			return 1
		}
		text = string(b)
	}
	base, err := client.ParseBaseURL(*apiURL)
	if err != nil {
		fmt.Fprintf(stderr, "%s: --api %q: %v\n", name, *apiURL, err)
		return 2
	}
	c := apiClient(base, tokenizeTimeout)
	tokens, err := c.Tokenize(ctx, *modelID, text, !*noSpecial)
	if err != nil {
		reportAPIError(stderr, name, base, err)
		return 1
	}
	switch {
	case *idsOnly:
		ids := make([]string, len(tokens))
		for i, t := range tokens {
			ids[i] = strconv.Itoa(int(t.ID))
		}
		fmt.Fprintln(stdout, strings.Join(ids, " "))
	case *piecesOnly:
		for _, t := range tokens {
			fmt.Fprintf(stdout, "%s\n", t.Piece)
		}
	default:
		for _, t := range tokens {
			fmt.Fprintf(stdout, "%d\t%s\n", t.ID, t.Piece)
		}
		fmt.Fprintf(stdout, "%d tokens\n", len(tokens))
	}
	return 0
}

// oneArgAndAPI parses the flags of a command that asks an agent about
// one thing (what names it in errors) and its --api URL (apiURL, once
// parsed). ok false means exit with code.
func oneArgAndAPI(fs *flag.FlagSet, args []string, name, what, usage string, apiURL *string, stderr io.Writer) (arg, base string, code int, ok bool) {
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", "", 0, false
		}
		return "", "", 2, false
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "%s: want one %s, got %d\n\n%s", name, what, len(pos), usage)
		return "", "", 2, false
	}
	base, err = client.ParseBaseURL(*apiURL)
	if err != nil {
		fmt.Fprintf(stderr, "%s: --api %q: %v\n", name, *apiURL, err)
		return "", "", 2, false
	}
	return pos[0], base, 0, true
}

// reportAPIError prints a command's failed request to an agent: when no
// agent answers at base, it says so and how to start one.
func reportAPIError(stderr io.Writer, name, base string, err error) {
	var ue *url.Error
	if errors.As(err, &ue) && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "%s: no agent answers at %s: %v — start one with `orrery agent`\n", name, base, ue.Err)
		return
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
}
