package ingress

import "github.com/loom-ml/loom/libs/errs"

func toStatus(err error) error { return errs.ToStatus(err) }
