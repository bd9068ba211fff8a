package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/browser"
	"github.com/loom-ml/loom/libs/testkit/need"
	"github.com/loom-ml/loom/services/gateway"
)

// TestConsoleModelPageShowsNewVersionsLive: a model's page, open in
// Chromium, shows a version uploaded after it opened, without a reload,
// well before the watch's safety-net refresh (gateway.DefaultChangeRefresh):
// the upload changes the model as ListModels shows it (latest_version),
// the change feed tells the page's watch of models, and the page reads
// its versions again.
func TestConsoleModelPageShowsNewVersionsLive(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install chromium", "chromium")
	s := startTrainingStack(t, 6*time.Minute)
	base := "http://" + s.st.RESTAddr
	art := modelArtifact(t)
	s.must("models", "upload", art, "--model", "livemodel", "--version-description", "first-version")

	bctx := browser.Start(t, s.ctx)
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		browserDo(t, bctx, what, actions...)
	}
	run("open the model's page", chromedp.Navigate(base+"/#/models/livemodel"), chromedp.WaitVisible(chromedp.CSS(`#signin`)))
	run("sign in", chromedp.SetValue(chromedp.CSS(`#secret`), s.key), chromedp.Click(chromedp.CSS(`#signin button`)),
		chromedp.WaitVisible(chromedp.CSS(`main[data-ready="model"]`)))
	waitText(t, bctx, "#page", "Versions", "first-version", "Lineage of version 1")
	if strings.Contains(text(t, bctx, "#page"), "second-version") {
		t.Fatal("the page shows the second version before it was uploaded")
	}
	// A mark on the window: a reload would lose it.
	mctx, mcancel := context.WithTimeout(bctx, 30*time.Second)
	_, err := chromedp.Run(mctx, chromedp.Evaluate[int](`(window.loomLiveMark = 7, 0)`))
	mcancel()
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	s.must("models", "upload", art, "--parent-model", "livemodel", "--version-description", "second-version", "--async")
	// Shorter than the refresh: only the change feed can bring it this soon.
	within := min(15*time.Second, gateway.DefaultChangeRefresh-5*time.Second)
	var last string
	testkit.WaitFor(t, within, "the open model page to show version 2", func() (bool, error) {
		c, cancel := context.WithTimeout(bctx, 5*time.Second)
		defer cancel()
		var err error
		last, err = chromedp.Run(c, chromedp.Text(chromedp.CSS("#page")))
		return err == nil && strings.Contains(last, "second-version") && strings.Contains(last, "Lineage of version 2"), nil
	})
	t.Logf("the uploaded version showed on the open model page after %s", time.Since(start).Round(time.Millisecond))
	mctx, mcancel = context.WithTimeout(bctx, 30*time.Second)
	mark, err := chromedp.Run(mctx, chromedp.Evaluate[int](`window.loomLiveMark || 0`))
	mcancel()
	if err != nil || mark != 7 {
		t.Errorf("the page was reloaded (mark %d, %v): the version was to appear without one", mark, err)
	}
}
