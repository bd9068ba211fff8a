package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func (a *app) modelsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "models",
		Aliases: []string{"model"},
		Short:   "Inspect the model registry",
	}
	var versions string
	list := &cobra.Command{
		Use:     "list [--versions MODEL]",
		Aliases: []string{"ls"},
		Short:   "List models, or the versions of one model",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.models()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if versions != "" {
				resp := &loomv1.ListModelVersionsResponse{}
				err := paging.Each(func(token string) (string, error) {
					ctx, cancel := a.call(cmd.Context())
					defer cancel()
					page, err := cl.ListModelVersions(ctx, &loomv1.ListModelVersionsRequest{Parent: a.modelName(versions), PageToken: token})
					resp.Versions = append(resp.Versions, page.GetVersions()...)
					return page.GetNextPageToken(), err
				})
				if err != nil {
					return a.notFoundHint(a.explain("list versions of model "+versions, err), err, "loom models list")
				}
				if a.output == "json" {
					return writeJSON(out, resp)
				}
				if len(resp.GetVersions()) == 0 {
					fmt.Fprintf(out, "Model %s has no versions yet.\n", versions)
					return nil
				}
				return renderVersions(out, resp.GetVersions(), a.now())
			}
			resp := &loomv1.ListModelsResponse{}
			err = paging.Each(func(token string) (string, error) {
				ctx, cancel := a.call(cmd.Context())
				defer cancel()
				page, err := cl.ListModels(ctx, &loomv1.ListModelsRequest{Parent: a.parent(), PageToken: token})
				resp.Models = append(resp.Models, page.GetModels()...)
				return page.GetNextPageToken(), err
			})
			if err != nil {
				return a.explain("list models", err)
			}
			if a.output == "json" {
				return writeJSON(out, resp)
			}
			if len(resp.GetModels()) == 0 {
				fmt.Fprintf(out, "No models in project %s. A job submitted with --model NAME registers one when it succeeds.\n", a.project)
				return nil
			}
			return renderModels(out, resp.GetModels(), a.now())
		},
	}
	list.Flags().StringVar(&versions, "versions", "", "list the versions of this model")
	cmd.AddCommand(list)
	return cmd
}
