package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/state"
)

// Pull runs POST /models/pull: the node starts pulling ref.
func (c *Client) Pull(ctx context.Context, ref string) (state.Download, error) {
	var d state.Download
	err := c.do(ctx, http.MethodPost, "/models/pull", api.PullRequest{Model: ref}, &d)
	return d, err
}

// CancelPull runs DELETE /models/pull/{id}.
func (c *Client) CancelPull(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, path("/models/pull/", id), nil, nil)
}

// Download reads /state/downloads/{id}.
func (c *Client) Download(ctx context.Context, id string) (state.Download, error) {
	var d state.Download
	err := c.get(ctx, path("/state/downloads/", id), &d)
	return d, err
}

// DeleteModel runs DELETE /models?model={id}[&node={node}]: it removes a
// model from a node's stores (node "": the agent's own).
func (c *Client) DeleteModel(ctx context.Context, id, node string) (api.ModelDeleted, error) {
	q := url.Values{"model": {id}}
	if node != "" {
		q.Set("node", node)
	}
	var d api.ModelDeleted
	err := c.do(ctx, http.MethodDelete, "/models?"+q.Encode(), nil, &d)
	return d, err
}
