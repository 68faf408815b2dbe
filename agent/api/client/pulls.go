package client

import (
	"context"
	"net/http"

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
