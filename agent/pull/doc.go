// Package pull gets models from where people publish them: the Hugging
// Face hub (hf.co/{org}/{repo}[:{quant}]) into the HF cache layout, with
// resumable, verified, parallel ranged downloads (Fetcher).
package pull
