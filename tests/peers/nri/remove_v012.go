//go:build !nri080

package main

import (
	"context"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
)

// NRI v0.12 has a dedicated RemoveContainer call (with a StateChange fallback inside).
func removeContainer(ctx context.Context, r *adaptation.Adaptation, pod *api.PodSandbox, c *api.Container) error {
	return r.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: pod, Container: c})
}
