package chattmpl

// Statement nodes.
type (
	node interface{}

	textNode   struct{ text string }
	outputNode struct{ expr expr }
	ifNode     struct {
		conds  []expr
		bodies [][]node // len(bodies) == len(conds) or len(conds)+1 (else)
	}
	forNode struct {
		targets  []string // one name, or names to unpack
		iter     expr
		cond     expr // optional "if" filter
		body     []node
		elseBody []node
		line     int
	}
	setNode struct {
		targets []string // names to unpack into, or one name
		attr    string   // set ns.attr: targets[0] is the namespace
		value   expr
	}
	setBlockNode struct {
		name    string
		filters []*filterExpr // applied to the captured text, in order
		body    []node
	}
	macroNode struct {
		name string
		m    *macroDef
	}
	callBlockNode struct {
		call *callExpr
		m    *macroDef // the caller
	}
	filterBlockNode struct {
		filters []*filterExpr
		body    []node
	}
	breakNode    struct{}
	continueNode struct{}
)

type macroDef struct {
	name     string
	params   []string
	defaults []expr // aligned with the tail of params; nil where none
	body     []node
}

// Expression nodes.
type (
	expr interface{}

	constExpr struct{ v any }
	nameExpr  struct {
		name string
		line int
	}
	listExpr  struct{ items []expr }
	tupleExpr struct{ items []expr }
	dictExpr  struct{ keys, vals []expr }
	attrExpr  struct {
		obj  expr
		name string
	}
	itemExpr  struct{ obj, key expr }
	sliceExpr struct {
		obj               expr
		start, stop, step expr // nil where omitted
	}
	unaryExpr struct {
		op string // "not", "-", "+"
		x  expr
	}
	binExpr struct {
		op   string
		l, r expr
	}
	condExpr struct{ cond, yes, no expr } // no may be nil
	callExpr struct {
		fn     expr
		args   []expr
		kwargs []kwarg
	}
	filterExpr struct {
		x      expr // nil inside filter blocks
		name   string
		args   []expr
		kwargs []kwarg
		line   int
	}
	testExpr struct {
		x      expr
		name   string
		negate bool
		args   []expr
		line   int
	}
)

type kwarg struct {
	name string
	v    expr
}
