package bench

import (
	"math"
	"testing"
)

// llama-batched-bench's table, as it printed it here.
const batchedTable = `
main: n_kv_max = 2048, n_batch = 2048, n_ubatch = 512, flash_attn = 1, is_pp_shared = 0

|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |
|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|
|    32 |     32 |    1 |     64 |    1.064 |    30.07 |    4.968 |     6.44 |    6.032 |    10.61 |
|    32 |     32 |    4 |    256 |    2.228 |    57.46 |   11.007 |    11.63 |   13.234 |    19.34 |
`

func TestParseLlamaBatched(t *testing.T) {
	got, err := parseLlamaBatched([]byte(batchedTable))
	if err != nil || len(got) != 2 || got[1] != [2]float64{30.07, 6.44} || got[4] != [2]float64{57.46, 11.63} {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := parseLlamaBatched([]byte("error: model not found\n")); err == nil {
		t.Fatal("output without rows parsed")
	}
	// The mean of the runs before and after.
	m, ok := meanLlama([]map[int][2]float64{got, {1: {40, 8}, 4: {60, 12}}}, 4)
	if !ok || math.Abs(m[0]-58.73) > 1e-9 || math.Abs(m[1]-11.815) > 1e-9 {
		t.Fatalf("mean %v %v", m, ok)
	}
	if _, ok := meanLlama([]map[int][2]float64{got}, 8); ok {
		t.Fatal("a B llama did not run has a mean")
	}
}

func FuzzParseLlamaBatched(f *testing.F) {
	f.Add([]byte(batchedTable))
	f.Add([]byte("| a | b | c | d | e | f | g | h | i | j |"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rows, err := parseLlamaBatched(b)
		if err == nil && len(rows) == 0 {
			t.Fatal("no rows and no error")
		}
	})
}
