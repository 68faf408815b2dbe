package chattmpl

import (
	"fmt"
	"sort"
	"strings"
)

// Ordering and aggregating filters: sort, dictsort, min, max and sum, with
// jinja2's case-insensitive keys.

// orderFilters sort and aggregate the items of a sequence.
func orderFilters() map[string]filterFn {
	return map[string]filterFn{
		"dictsort": filterDictsort,
		"sort":     filterSort,
		"min":      func(r *renderer, v any, a []any, kw *Dict) (any, error) { return minMax(v, kw, -1) },
		"max":      func(r *renderer, v any, a []any, kw *Dict) (any, error) { return minMax(v, kw, 1) },
		"sum":      filterSum,
	}
}

func sortKey(v any, caseSensitive bool) any {
	if s, ok := v.(string); ok && !caseSensitive {
		return strings.ToLower(s)
	}
	return v
}

func sortItems(items []any, key func(any) (any, error), reverse bool) ([]any, error) {
	out := append([]any{}, items...)
	keys := make([]any, len(out))
	for i, it := range out {
		k, err := key(it)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	var serr error
	sort.SliceStable(idx, func(i, j int) bool {
		c, err := pyCompare(keys[idx[i]], keys[idx[j]])
		if err != nil {
			serr = err
		}
		if reverse {
			return c > 0
		}
		return c < 0
	})
	if serr != nil {
		return nil, serr
	}
	res := make([]any, len(out))
	for i, k := range idx {
		res[i] = out[k]
	}
	return res, nil
}

func filterDictsort(r *renderer, v any, a []any, kw *Dict) (any, error) {
	d, ok := v.(*Dict)
	if !ok {
		return nil, fmt.Errorf("TypeError: dictsort needs a mapping")
	}
	cs := truthy(arg(a, kw, 0, "case_sensitive", false))
	by := pyStr(arg(a, kw, 1, "by", "key"))
	rev := truthy(arg(a, kw, 2, "reverse", false))
	pos := 0
	if by == "value" {
		pos = 1
	}
	return sortItems(dictItems(d), func(it any) (any, error) { return sortKey(it.(tuple)[pos], cs), nil }, rev)
}

func filterSort(r *renderer, v any, a []any, kw *Dict) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	rev := truthy(arg(a, kw, 0, "reverse", false))
	cs := truthy(arg(a, kw, 1, "case_sensitive", false))
	attr := arg(a, kw, 2, "attribute", nil)
	return sortItems(items, func(it any) (any, error) {
		if attr != nil {
			x, err := attrPath(it, attr)
			return sortKey(x, cs), err
		}
		return sortKey(it, cs), nil
	}, rev)
}

func minMax(v any, kw *Dict, sign int) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return undef("No aggregated item, sequence was empty."), nil
	}
	cs, _ := kw.Get("case_sensitive")
	attr, _ := kw.Get("attribute")
	best := items[0]
	key := func(x any) (any, error) {
		if attr != nil {
			y, err := attrPath(x, attr)
			return sortKey(y, truthy(cs)), err
		}
		return sortKey(x, truthy(cs)), nil
	}
	bk, err := key(best)
	if err != nil {
		return nil, err
	}
	for _, it := range items[1:] {
		k, err := key(it)
		if err != nil {
			return nil, err
		}
		c, err := pyCompare(k, bk)
		if err != nil {
			return nil, err
		}
		if c*sign > 0 {
			best, bk = it, k
		}
	}
	return best, nil
}

func filterSum(r *renderer, v any, a []any, kw *Dict) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	attr := arg(a, kw, 0, "attribute", nil)
	total := arg(a, kw, 1, "start", int64(0))
	for _, it := range items {
		if attr != nil {
			if it, err = attrPath(it, attr); err != nil {
				return nil, err
			}
		}
		if total, err = binOp("+", total, it); err != nil {
			return nil, err
		}
	}
	return total, nil
}
