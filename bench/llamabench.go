package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"text/tabwriter"
)

// llamaBenchRun runs llama.cpp's llama-bench with engine-bench's settings.
type llamaBenchRun struct {
	bin, model              string
	pp, tg, threads, repeat int
	flashAttn               bool
}

// run returns the mean tok/s by test name ("pp128", "tg64").
func (l llamaBenchRun) run(ctx context.Context) (map[string]float64, error) {
	fa := "off"
	if l.flashAttn {
		fa = "on"
	}
	cmd := exec.CommandContext(ctx, l.bin, "-m", l.model, "-p", strconv.Itoa(l.pp), "-n", strconv.Itoa(l.tg),
		"-t", strconv.Itoa(l.threads), "-r", strconv.Itoa(l.repeat), "-fa", fa, "-lm", "none", "-o", "json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = "…" + msg[len(msg)-2000:]
		}
		return nil, fmt.Errorf("llama-bench (%s; build it with scripts/llama-ref.sh): %w\n%s", l.bin, err, msg)
	}
	return parseLlamaBench(out)
}

// parseLlamaBench reads llama-bench's -o json: the mean tok/s by test.
func parseLlamaBench(out []byte) (map[string]float64, error) {
	var tests []struct {
		NPrompt int     `json:"n_prompt"`
		NGen    int     `json:"n_gen"`
		AvgTS   float64 `json:"avg_ts"`
	}
	if err := json.Unmarshal(out, &tests); err != nil {
		return nil, fmt.Errorf("llama-bench output: %w", err)
	}
	res := map[string]float64{}
	for _, t := range tests {
		switch {
		case t.NPrompt > 0 && t.NGen == 0:
			res[fmt.Sprintf("pp%d", t.NPrompt)] = t.AvgTS
		case t.NGen > 0 && t.NPrompt == 0:
			res[fmt.Sprintf("tg%d", t.NGen)] = t.AvgTS
		}
	}
	return res, nil
}

// PrintEngine prints an engine report's tables.
func PrintEngine(w io.Writer, rep *EngineReport) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TEST\tTRACING\tTOK/S\t±\tTTFT MS")
	for _, r := range rep.Rows {
		on := "off"
		if r.Traced {
			on = "on"
		}
		ttft := ""
		if r.TTFTMsMu > 0 {
			ttft = fmt.Sprintf("%.1f", r.TTFTMsMu)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%s\n", r.Test, on, r.Mean, r.SD, ttft)
	}
	tw.Flush()
	if len(rep.VsLlamaBench) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TEST\tORRERY TOK/S\tLLAMA-BENCH TOK/S (BEFORE, AFTER)\tRATIO")
		for _, v := range rep.VsLlamaBench {
			var runs []string
			for _, x := range v.LlamaRuns {
				runs = append(runs, fmt.Sprintf("%.2f", x))
			}
			fmt.Fprintf(tw, "%s\t%.2f\t%.2f (%s)\t%.2f×\n", v.Test, v.Orrery, v.Llama, strings.Join(runs, ", "), v.Ratio)
		}
		tw.Flush()
	}
	if rep.ReadBandwidthGBps > 0 {
		fmt.Fprintf(w, "memory read bandwidth %.1f GB/s (%d threads): decode bound %.1f tok/s for %s read per token (%.3f GB/token",
			rep.ReadBandwidthGBps, rep.Threads, rep.DecodeBoundTokPerSec, HumanBytes(rep.ActiveBytes), float64(rep.ActiveBytes)/1e9)
		if rep.ActiveBytes < rep.WeightBytes*9/10 {
			fmt.Fprintf(w, ", %.0f %% of the %s of weights", 100*float64(rep.ActiveBytes)/float64(rep.WeightBytes), HumanBytes(rep.WeightBytes))
		}
		fmt.Fprintln(w, ")")
		for _, r := range rep.Rows {
			if strings.HasPrefix(r.Test, "tg") && !r.Traced && rep.DecodeBoundTokPerSec > 0 {
				fmt.Fprintf(w, "decode %.2f tok/s = %.0f %% of the bound, %.1f GB/s of active weights\n",
					r.Mean, 100*r.Mean/rep.DecodeBoundTokPerSec, r.Mean*float64(rep.ActiveBytes)/1e9)
			}
		}
	}
}
