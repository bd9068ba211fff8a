# hpobench's Optuna driver: one study at a time, driven over stdin/stdout
# with one JSON object per line each way (ask/tell). It never evaluates an
# objective: hpobench computes every value in Go and tells it here, so both
# systems search the identical function.
#
# Requests and replies:
#   {"op":"hello"}                                  -> {"optuna": "<version>"}
#   {"op":"new","sampler":"tpe"|"random","seed":N,
#    "params":[{"name":..,"low":..,"high":..,"log":bool,"int":bool}]}
#                                                   -> {"ok": true}
#   {"op":"ask"}                                    -> {"values": [..]} (params' order)
#   {"op":"tell","value":V}                         -> {"ok": true}
# An error is {"error": "<text>"}; end of input ends the driver.
import json
import sys

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)


def main():
    study, params, trial = None, [], None
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            m = json.loads(line)
            op = m["op"]
            if op == "hello":
                out = {"optuna": optuna.__version__}
            elif op == "new":
                seed = int(m["seed"])
                if m["sampler"] == "tpe":
                    sampler = optuna.samplers.TPESampler(seed=seed)
                elif m["sampler"] == "random":
                    sampler = optuna.samplers.RandomSampler(seed=seed)
                else:
                    raise ValueError("unknown sampler %r" % m["sampler"])
                study = optuna.create_study(direction="minimize", sampler=sampler)
                params, trial = m["params"], None
                out = {"ok": True}
            elif op == "ask":
                trial = study.ask()
                values = []
                for p in params:
                    if p["int"]:
                        v = trial.suggest_int(p["name"], int(p["low"]), int(p["high"]), log=p["log"])
                    else:
                        v = trial.suggest_float(p["name"], p["low"], p["high"], log=p["log"])
                    values.append(v)
                out = {"values": values}
            elif op == "tell":
                study.tell(trial, float(m["value"]))
                trial = None
                out = {"ok": True}
            else:
                raise ValueError("unknown op %r" % op)
        except Exception as e:  # reported to Go, which stops the run
            out = {"error": "%s: %s" % (type(e).__name__, e)}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
