package chattmpl

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Number filters: int, float, abs and round, with Python's conversions.

// numberFilters convert and round numbers.
func numberFilters() map[string]filterFn {
	return map[string]filterFn{
		"int":   filterInt,
		"float": filterFloat,
		"abs":   filterAbs,
		"round": filterRound,
	}
}

func filterInt(r *renderer, v any, a []any, kw *Dict) (any, error) {
	def := arg(a, kw, 0, "default", int64(0))
	switch x := v.(type) {
	case int64:
		return x, nil
	case bool:
		n, _ := asInt(x)
		return n, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return def, nil
		}
		return int64(x), nil
	case string:
		s := strings.TrimFunc(x, pySpace)
		s = strings.ReplaceAll(s, "_", "")
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return int64(f), nil
		}
	}
	return def, nil
}

func filterFloat(r *renderer, v any, a []any, kw *Dict) (any, error) {
	def := arg(a, kw, 0, "default", 0.0)
	switch x := v.(type) {
	case float64:
		return x, nil
	case int64, bool:
		f, _ := asFloat(x)
		return f, nil
	case string:
		if f, err := strconv.ParseFloat(strings.TrimFunc(x, pySpace), 64); err == nil {
			return f, nil
		}
	}
	return def, nil
}

func filterAbs(r *renderer, v any, a []any, kw *Dict) (any, error) {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return -x, nil
		}
		return x, nil
	case bool:
		n, _ := asInt(x)
		return n, nil
	case float64:
		return math.Abs(x), nil
	}
	return nil, fmt.Errorf("TypeError: bad operand type for abs(): '%s'", typeName(v))
}

func filterRound(r *renderer, v any, a []any, kw *Dict) (any, error) {
	prec, err := intArg(arg(a, kw, 0, "precision", int64(0)))
	if err != nil {
		return nil, err
	}
	method := pyStr(arg(a, kw, 1, "method", "common"))
	f, ok := asFloat(v)
	if !ok {
		return nil, fmt.Errorf("TypeError: round needs a number")
	}
	p := math.Pow(10, float64(prec))
	switch method {
	case "common": // Python's round: half to even
		return math.RoundToEven(f*p) / p, nil
	case "ceil":
		return math.Ceil(f*p) / p, nil
	case "floor":
		return math.Floor(f*p) / p, nil
	}
	return nil, fmt.Errorf("FilterArgumentError: method must be common, ceil or floor")
}
