package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/agent/api/client"
	"github.com/orrery-cluster/orrery/agent/state"
)

const pullUsage = `Usage: orrery pull [--api URL] [--detach] hf.co/{org}/{repo}[:{quant}] | [namespace/]name[:tag]

Asks the running agent to pull a GGUF model onto its machine:

  hf.co/{org}/{repo}[:{quant}]  from Hugging Face, as Ollama's hf.co names
      it: the quant tag picks the file (default Q4_K_M), every part of a
      split GGUF comes along; into the Hugging Face cache (HF_HOME,
      HF_HUB_CACHE). The agent honours HF_ENDPOINT, HF_TOKEN and
      HF_HUB_OFFLINE.
  [namespace/]name[:tag]  from the Ollama registry (the agent's
      --registry), manifest and blobs, into Ollama's store (OLLAMA_MODELS).

Files come in parallel ranged chunks, verified by sha256; a pull cut off
resumes where it was. Progress prints here until the model is in (Ctrl-C
cancels the pull), or, with --detach, shows under /state/downloads/{id}.

Flags:
`

// pullPoll is how often the progress is read.
const pullPoll = 500 * time.Millisecond

func runPull(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const name = "orrery pull"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, pullUsage); fs.PrintDefaults() }
	apiURL := fs.String("api", client.DefaultBaseURL, "API URL of the agent that pulls (the model goes to its machine)")
	detach := fs.Bool("detach", false, "start the pull and print its id, without waiting")
	ref, base, code, ok := oneArgAndAPI(fs, args, name, "model reference", pullUsage, apiURL, stderr)
	if !ok {
		return code
	}
	c := apiClient(base, 30*time.Second)
	d, err := c.Pull(ctx, ref)
	if err != nil {
		reportAPIError(stderr, name, base, err)
		return 1
	}
	if *detach {
		fmt.Fprintln(stdout, d.ID)
		return 0
	}
	fmt.Fprintf(stdout, "pulling %s (%s)\n", d.Ref, d.ID)
	t := time.NewTicker(pullPoll)
	defer t.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c.CancelPull(cctx, d.ID)
			cancel()
			fmt.Fprintf(stderr, "\n%s: canceled; a later pull of %s resumes it\n", name, d.Ref)
			return 1
		case <-t.C:
		}
		cur, err := c.Download(ctx, d.ID)
		if err != nil {
			continue // the state may lag the POST's answer a moment
		}
		if line := progressLine(cur); line != last {
			fmt.Fprint(stdout, "\r"+line)
			last = line
		}
		switch cur.Status {
		case state.DownloadDone:
			fmt.Fprintf(stdout, "\nmodel %s is in (%s)\n", cur.Model, mb(cur.Size))
			return 0
		case state.DownloadFailed, state.DownloadCanceled:
			fmt.Fprintf(stderr, "\n%s: %s: %s\n", name, strings.ToLower(cur.Status), cur.Error)
			return 1
		}
	}
}

// progressLine is "[#####.....] 52% 1.2 GB / 2.3 GB 85.3 MB/s ETA 13s".
func progressLine(d state.Download) string {
	const width = 30
	frac := 0.0
	if d.Size > 0 {
		frac = float64(d.Bytes) / float64(d.Size)
	}
	n := int(frac * width)
	line := fmt.Sprintf("[%s%s] %3.0f%% %s / %s", strings.Repeat("#", n), strings.Repeat(".", width-n), 100*frac, mb(d.Bytes), mb(d.Size))
	if d.MBps != nil {
		line += fmt.Sprintf("  %.1f MB/s", *d.MBps)
	}
	if d.EtaSeconds != nil {
		line += fmt.Sprintf("  ETA %s", (time.Duration(*d.EtaSeconds) * time.Second).Round(time.Second))
	}
	if d.Stalls > 0 {
		line += fmt.Sprintf("  %d stalled connection(s) resumed", d.Stalls)
	} else if d.Retries > 0 {
		line += fmt.Sprintf("  %d retries", d.Retries)
	}
	return line + "   "
}

func mb(n int64) string {
	if n >= 1e9 {
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/1e6)
}
