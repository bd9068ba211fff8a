package cli

import (
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// modelsCommand is `loom models`: the model registry (ModelService).
// MODEL arguments are a model id, "id@VERSION", "id@ALIAS" or a full name.
func (a *app) modelsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "models",
		Aliases: []string{"model"},
		Short:   "Work with the model registry: versions, aliases, uploads, exports",
	}
	cmd.AddCommand(a.modelsList(), a.modelsGet(), a.modelsVersions(), a.modelsUpload(), a.modelsAlias(), a.modelsExport(), a.modelsDelete())
	return cmd
}

func (a *app) modelsList() *cobra.Command {
	var versions, filter, orderBy string
	list := &cobra.Command{
		Use:     "list [--filter F] [--order-by O]",
		Aliases: []string{"ls"},
		Short:   "List models (each at its default version)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.models()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if versions != "" {
				// Kept from before `loom models versions`.
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
				page, err := cl.ListModels(ctx, &loomv1.ListModelsRequest{Parent: a.parent(), PageToken: token, Filter: filter, OrderBy: orderBy})
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
				if filter != "" {
					// A model matches as it is listed, at its default
					// version (Vertex's ListModels): a label on another
					// version is not the model's, and a user looking for it
					// needs the per-version list.
					fmt.Fprintf(out, "No models in project %s match %s at their default version. Labels and version fields are per version: the same --filter on `loom models versions MODEL` matches every version of MODEL.\n",
						a.project, filter)
					return nil
				}
				fmt.Fprintf(out, "No models in project %s. A job submitted with --model NAME registers one when it succeeds; `loom models upload` registers a directory.\n", a.project)
				return nil
			}
			return renderModelList(out, resp.GetModels(), a.now())
		},
	}
	list.Flags().StringVar(&versions, "versions", "", "list the versions of this model (see also \"loom models versions\")")
	list.Flags().StringVar(&filter, "filter", "", `AIP-160 filter on each model at its default version (labels are per version), e.g. 'labels.team=vision AND create_time>"2026-01-01T00:00:00Z"'`)
	list.Flags().StringVar(&orderBy, "order-by", "", `order, e.g. "create_time desc" (display_name, create_time, update_time, version_id)`)
	return list
}

func (a *app) modelsVersions() *cobra.Command {
	var filter, orderBy string
	c := &cobra.Command{
		Use:   "versions MODEL [--filter F] [--order-by O]",
		Short: "List a model's versions with their aliases and lineage",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.models()
			if err != nil {
				return err
			}
			resp := &loomv1.ListModelVersionsResponse{}
			err = paging.Each(func(token string) (string, error) {
				ctx, cancel := a.call(cmd.Context())
				defer cancel()
				page, err := cl.ListModelVersions(ctx, &loomv1.ListModelVersionsRequest{Parent: a.modelName(args[0]), PageToken: token, Filter: filter, OrderBy: orderBy})
				resp.Models = append(resp.Models, page.GetModels()...)
				return page.GetNextPageToken(), err
			})
			if err != nil {
				return a.notFoundHint(a.explain("list versions of model "+args[0], err), err, "loom models list")
			}
			out := cmd.OutOrStdout()
			if a.output == "json" {
				return writeJSON(out, &loomv1.ListModelVersionsResponse{Models: resp.GetModels()})
			}
			if len(resp.GetModels()) == 0 {
				fmt.Fprintf(out, "No versions of %s match.\n", args[0])
				return nil
			}
			return renderModelVersions(out, resp.GetModels(), a.now())
		},
	}
	c.Flags().StringVar(&filter, "filter", "", "AIP-160 filter, e.g. labels.stage=qa")
	c.Flags().StringVar(&orderBy, "order-by", "", `order, e.g. "version_id desc"`)
	return c
}

func (a *app) modelsGet() *cobra.Command {
	return &cobra.Command{
		Use:   "get MODEL[@VERSION|@ALIAS]",
		Short: "Show one version of a model (the default one for a bare name)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.models()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			m, err := cl.GetModel(ctx, &loomv1.GetModelRequest{Name: a.modelName(args[0])})
			if err != nil {
				return a.notFoundHint(a.explain("get model "+args[0], err), err, modelListHint(args[0], err))
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), m)
			}
			return renderModel(cmd.OutOrStdout(), m, a.now())
		},
	}
}

func (a *app) modelsUpload() *cobra.Command {
	var async bool
	var f struct {
		model, parent, display, description, versionDescription string
		aliases, labels                                         []string
	}
	c := &cobra.Command{
		Use:   "upload DIR (--model ID | --parent-model MODEL | --display-name NAME)",
		Short: "Register a directory holding a MANIFEST as a model version",
		Long: "Registers DIR (an absolute path the registry can read, holding a MANIFEST of sha256sum lines) as a new\n" +
			"model (--model ID, or named after --display-name) or as the next version of --parent-model.\n" +
			"The upload is an operation: the command shows its progress and returns when the version is stored\n" +
			"(its files hashed), or at once with --async, printing the operation's name (GET /v1/NAME shows it).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			labels := map[string]string{}
			for _, kv := range f.labels {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return usagef("--label wants KEY=VALUE, got %q", kv)
				}
				labels[k] = v
			}
			dir := args[0]
			if !strings.Contains(dir, "://") {
				abs, err := filepath.Abs(dir)
				if err != nil {
					return err
				}
				dir = abs
			}
			// A request id makes the call safe to retry: a lost answer does
			// not register a second version.
			req := &loomv1.UploadModelRequest{Parent: a.parent(), ModelId: f.model, RequestId: requestID(), Model: &loomv1.Model{
				DisplayName: f.display, Description: f.description, VersionDescription: f.versionDescription,
				VersionAliases: f.aliases, Labels: labels, ArtifactUri: dir,
			}}
			if f.parent != "" {
				req.ParentModel = a.modelName(f.parent)
			}
			cl, err := a.models()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			op, err := cl.UploadModel(ctx, req)
			if err != nil {
				return a.explain("upload "+args[0], err)
			}
			return a.followOperation(cmd, op, opView{
				title: "Registering " + args[0],
				what:  "upload " + args[0],
				async: async,
				final: func(op *loomv1.Operation, took time.Duration) string {
					r := op.GetUploadModel()
					return fmt.Sprintf("Registered %s version %s (%s). See it with: loom models get %s@%s",
						shown(r.GetModel()), shown(r.GetModelVersionId()), elapsed(took), shown(shortName(r.GetModel())), shown(r.GetModelVersionId()))
				},
			})
		},
	}
	fl := c.Flags()
	fl.BoolVar(&async, "async", false, "print the operation's name and return without waiting")
	fl.StringVar(&f.model, "model", "", "id of the model (created when new)")
	fl.StringVar(&f.parent, "parent-model", "", "register the next version of this model")
	fl.StringVar(&f.display, "display-name", "", "the model's display name (names a new model when --model is not given)")
	fl.StringVar(&f.description, "description", "", "the model's description")
	fl.StringVar(&f.versionDescription, "version-description", "", "this version's description")
	fl.StringArrayVar(&f.aliases, "alias", nil, "give this version an alias, moving it from another version (repeatable; \"default\" makes it the default)")
	fl.StringArrayVar(&f.labels, "label", nil, "KEY=VALUE label of this version (repeatable)")
	return c
}

func (a *app) modelsAlias() *cobra.Command {
	c := &cobra.Command{
		Use:   "alias MODEL@VERSION ALIAS... ",
		Short: "Give a version aliases (moving them from other versions); -ALIAS removes one",
		Long: "Gives MODEL@VERSION each ALIAS, taking it from the version that held it, and removes each -ALIAS.\n" +
			"\"default\" names the version a bare model name resolves to; it can be moved, not removed.\n" +
			"Use -- before the first -ALIAS: loom models alias tiny@3 -- -canary",
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.models()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			m, err := cl.MergeVersionAliases(ctx, &loomv1.MergeVersionAliasesRequest{Name: a.modelName(args[0]), VersionAliases: args[1:]})
			if err != nil {
				return a.notFoundHint(a.explain("set aliases of "+args[0], err), err, modelListHint(args[0], err))
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), m)
			}
			model, _, _ := strings.Cut(modelID(m.GetName()), "@")
			fmt.Fprintf(cmd.OutOrStdout(), "Version %s of %s now has aliases: %s\n", shown(m.GetVersionId()), shown(model), shown(joinOr(m.GetVersionAliases(), "(none)")))
			return nil
		},
	}
	// "-canary" reads as flags to the parser: say how to remove an alias.
	c.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		if strings.HasPrefix(err.Error(), "unknown shorthand flag") {
			return usagef("%v: to remove an alias, put -- before it: `loom models alias MODEL@VERSION -- -ALIAS`", err)
		}
		return cmd.Parent().FlagErrorFunc()(cmd, err)
	})
	return c
}

func (a *app) modelsExport() *cobra.Command {
	var async bool
	c := &cobra.Command{
		Use:   "export MODEL[@VERSION|@ALIAS] DESTINATION",
		Short: "Copy a version's artifacts to DESTINATION (file:///dir, s3://bucket/prefix, gs://…, azblob://…)",
		Long: "Copies every artifact of the version, byte for byte (checksums compared). Objects already at the\n" +
			"destination with the same checksum are skipped, so an export can be rerun after an interruption.\n" +
			"The export is an operation: the command shows its progress and returns when it ends, or at once\n" +
			"with --async, printing the operation's name (GET /v1/NAME shows it; the copy goes on in the registry).",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.models()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			// A request id makes the call safe to retry: a lost answer
			// does not start a second copy.
			op, err := cl.ExportModel(ctx, &loomv1.ExportModelRequest{Name: a.modelName(args[0]), RequestId: requestID(),
				OutputConfig: &loomv1.ExportModelOutputConfig{ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: args[1]}}})
			if err != nil {
				return a.notFoundHint(a.explain("export "+args[0], err), err, modelListHint(args[0], err))
			}
			return a.followOperation(cmd, op, opView{
				title: "Exporting " + args[0] + " to " + args[1],
				what:  "export " + args[0],
				async: async,
				final: func(op *loomv1.Operation, took time.Duration) string {
					r := op.GetExportModel()
					return fmt.Sprintf("Exported %s to %s: %d copied, %d already there, %d bytes (%s).",
						args[0], shown(r.GetDestination()), r.GetCopied(), r.GetSkipped(), r.GetBytes(), elapsed(took))
				},
			})
		},
	}
	c.Flags().BoolVar(&async, "async", false, "print the operation's name and return without waiting")
	return c
}

func (a *app) modelsDelete() *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "delete MODEL | MODEL@VERSION [--force]",
		Short: "Delete a model with all its versions, or one version",
		Long: "Deletes one version when the name has \"@VERSION\" (or \"@ALIAS\"): not the only version, and not the\n" +
			"one holding \"default\" (move it first with `loom models alias`). A version holding another alias\n" +
			"(\"prod\") is refused, naming it, unless --force: then its aliases are dropped with it.\n" +
			"A bare name deletes the whole model.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.models()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			name := a.modelName(args[0])
			what := "model " + args[0] + " and all its versions"
			if strings.Contains(shortName(name), "@") {
				what = "version " + args[0]
				_, err = cl.DeleteModelVersion(ctx, &loomv1.DeleteModelVersionRequest{Name: name, Force: force})
			} else {
				if force {
					return usagef("--force applies to one version (MODEL@VERSION): a whole model is deleted with all its aliases anyway")
				}
				_, err = cl.DeleteModel(ctx, &loomv1.DeleteModelRequest{Name: name})
			}
			if err != nil {
				return a.notFoundHint(a.explain("delete "+args[0], err), err, modelListHint(args[0], err))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Deleted %s.\n", what)
			return nil
		},
	}
	c.Flags().BoolVar(&force, "force", false, "delete a version that holds aliases other than default, dropping them")
	return c
}

// renderModelList is the models table: one row per model, at its default
// version.
func renderModelList(w io.Writer, ms []*loomv1.Model, now time.Time) error {
	tw := newTable(w)
	row(tw, "NAME", "DISPLAY NAME", "DEFAULT", "LATEST", "ALIASES", "UPDATED")
	for _, m := range ms {
		id, _, _ := strings.Cut(shortName(m.GetName()), "@")
		latest := "-"
		if m.GetLatestVersion() > 0 {
			latest = fmt.Sprint(m.GetLatestVersion())
		}
		row(tw, shown(id), cell(m.GetDisplayName(), 32), shown(orDash(m.GetVersionId())), latest,
			shown(joinOr(m.GetVersionAliases(), "-")), ago(m.GetUpdateTime(), now))
	}
	return tw.Flush()
}

// renderModelVersions is the versions table: one row per version.
func renderModelVersions(w io.Writer, ms []*loomv1.Model, now time.Time) error {
	tw := newTable(w)
	row(tw, "VERSION", "ALIASES", "DESCRIPTION", "PRODUCED BY", "ARTIFACT", "CREATED")
	for _, m := range ms {
		artifact := shown(m.GetArtifactUri())
		if m.GetArtifactChanged() != "" {
			artifact += " (changed: see loom models get)"
		}
		row(tw, shown(m.GetVersionId()), shown(joinOr(m.GetVersionAliases(), "-")), cell(m.GetVersionDescription(), 40),
			producedBy(m.GetLineage()), artifact, ago(m.GetVersionCreateTime(), now))
	}
	return tw.Flush()
}

// renderModel shows one served version, lineage included.
func renderModel(w io.Writer, m *loomv1.Model, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "Name:\t%s\n", shown(m.GetName()))
	fmt.Fprintf(tw, "Display name:\t%s\n", shown(orDash(m.GetDisplayName())))
	fmt.Fprintf(tw, "Description:\t%s\n", shownBlock(orDash(m.GetDescription())))
	fmt.Fprintf(tw, "Version:\t%s of %d\n", shown(m.GetVersionId()), m.GetLatestVersion())
	fmt.Fprintf(tw, "Aliases:\t%s\n", shown(joinOr(m.GetVersionAliases(), "-")))
	fmt.Fprintf(tw, "Version description:\t%s\n", shownBlock(orDash(m.GetVersionDescription())))
	fmt.Fprintf(tw, "Labels:\t%s\n", shown(orDash(kvs(m.GetLabels()))))
	fmt.Fprintf(tw, "Artifact:\t%s\n", shown(m.GetArtifactUri()))
	if why := m.GetArtifactChanged(); why != "" {
		// The files at Artifact are no longer this version's: said
		// beside it, so that nobody takes them for it.
		fmt.Fprintf(tw, "Artifact changed:\t%s\n", shownBlock(why))
	}
	fmt.Fprintf(tw, "Created:\t%s\n", ago(m.GetVersionCreateTime(), now))
	fmt.Fprintf(tw, "Updated:\t%s\n", ago(m.GetVersionUpdateTime(), now))
	l := m.GetLineage()
	for _, f := range []struct{ k, v string }{
		{"Job", l.GetJob()}, {"Custom job", l.GetCustomJob()}, {"Pipeline", l.GetTrainingPipeline()},
		{"Tuning job", l.GetTuningJob()}, {"Trial", l.GetTrial()}, {"Hyperparameters", kvs(l.GetHyperparameters())},
		{"Final metrics", metricsText(l.GetMetrics())}, {"Checkpoint", l.GetCheckpointUri()}, {"Data", l.GetDataUri()},
	} {
		if f.v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", f.k, shown(f.v))
		}
	}
	switch by := l.GetRecordedBy(); by {
	case "":
	case recordedByLoom:
		fmt.Fprintf(tw, "Lineage from:\tLoom (recorded from what ran)\n")
	default:
		fmt.Fprintf(tw, "Lineage from:\t%s, at upload (their word: not checked against what ran)\n", shown(by))
	}
	return tw.Flush()
}

// recordedByLoom is ModelLineage.recorded_by of a lineage Loom recorded
// from what ran (a pipeline's upload, a job's model output); any other
// value is the uploader who supplied it.
const recordedByLoom = "loom"

// producedBy is the most specific producer a lineage names, cleaned, with
// "(per USER)" when an uploader supplied it rather than Loom recording it.
func producedBy(l *loomv1.ModelLineage) string {
	for _, s := range []string{l.GetTrial(), l.GetTuningJob(), l.GetTrainingPipeline(), l.GetCustomJob(), l.GetJob()} {
		if s != "" {
			if i := strings.Index(s, "/locations/"); i >= 0 {
				s = s[i+len("/locations/"):]
				s = s[strings.IndexByte(s, '/')+1:]
			} else if j := strings.Index(s, "/jobs/"); j >= 0 {
				s = s[j+1:]
			}
			if by := l.GetRecordedBy(); by != "" && by != recordedByLoom {
				s += " (per " + by + ")"
			}
			return shown(s)
		}
	}
	return "-"
}

// shownBlock is multi-line text (a description) as a field of `loom models
// get`: each line cleaned as shown cleans (a tab as spaces), the lines after
// the first in the field's column.
func shownBlock(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = shown(strings.ReplaceAll(l, "\t", "    "))
	}
	return strings.Join(lines, "\n\t")
}

// modelID is "id@version" of a served name.
func modelID(name string) string { return shortName(name) }

func joinOr(ss []string, none string) string {
	if len(ss) == 0 {
		return none
	}
	return strings.Join(ss, ",")
}

func kvs(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

func metricsText(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%g", k, m[k]))
	}
	return strings.Join(parts, ",")
}

// modelListHint is the list a NotFound for the model reference ref points
// at: the model's versions when the model is there but has no such version
// or alias (the registry's "has no version"), so that a mistyped "@prod"
// shows the aliases there are, which `loom models list` (each model at its
// default version) does not; else the models.
func modelListHint(ref string, err error) string {
	model, _, versioned := strings.Cut(shortName(ref), "@")
	if versioned && model != "" && strings.Contains(statusMessage(err), "has no version") {
		return "loom models versions " + model
	}
	return "loom models list"
}
