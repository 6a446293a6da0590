//go:build nri080

package main

import (
	"context"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
)

// NRI v0.8 reports removal as a StateChange event.
func removeContainer(ctx context.Context, r *adaptation.Adaptation, pod *api.PodSandbox, c *api.Container) error {
	return r.RemoveContainer(ctx, &api.StateChangeEvent{Event: api.Event_REMOVE_CONTAINER, Pod: pod, Container: c})
}
