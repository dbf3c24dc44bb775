"""A small real model: logistic regression with NumPy, written for TI-ONE (TM_*) and runnable unmodified on PAI
(PAI_*) or SageMaker (SM_*), since the runtime sets every family.

Reads the `train` channel (CSV: features..., label), resumes from the `model` channel when one is given (incremental
training), checkpoints every epoch, prints `epoch=N loss=X accuracy=Y` (matched by metric_definitions), and saves the
weights to the model directory.
"""

import argparse
import glob
import json
import os

import numpy as np


def load_csv(channel_dir):
    files = sorted(glob.glob(os.path.join(channel_dir, "**", "*.csv"), recursive=True))
    if not files:
        raise SystemExit(f"no .csv files in channel directory {channel_dir}")
    data = np.concatenate([np.loadtxt(f, delimiter=",", ndmin=2) for f in files])
    return data[:, :-1], data[:, -1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--learning_rate", type=float, default=0.5)
    args = parser.parse_args()

    x, y = load_csv(os.environ["TM_CHANNEL_TRAIN"])
    weights, start_epoch = np.zeros(x.shape[1] + 1), 0
    checkpoint = os.path.join(os.environ["PAI_OUTPUT_CHECKPOINTS"], "checkpoint.npz")
    previous = os.path.join(os.environ.get("TM_CHANNEL_MODEL", "/nonexistent"), "model.npz")
    if os.path.exists(checkpoint):
        state = np.load(checkpoint)
        weights, start_epoch = state["weights"], int(state["epoch"]) + 1
        print(f"resumed from checkpoint at epoch {start_epoch}")
    elif os.path.exists(previous):
        weights = np.load(previous)["weights"]
        print(f"incremental training from previous model {previous}")

    xb = np.hstack([x, np.ones((len(x), 1))])
    for epoch in range(start_epoch, start_epoch + args.epochs):
        p = 1 / (1 + np.exp(-xb @ weights))
        loss = float(-np.mean(y * np.log(p + 1e-12) + (1 - y) * np.log(1 - p + 1e-12)))
        accuracy = float(np.mean((p > 0.5) == y))
        weights -= args.learning_rate * xb.T @ (p - y) / len(y)
        print(f"epoch={epoch} loss={loss:.5f} accuracy={accuracy:.4f}", flush=True)
        tmp = checkpoint + ".tmp.npz"
        np.savez(tmp, weights=weights, epoch=epoch)
        os.replace(tmp, checkpoint)

    model_dir = os.environ["TM_MODEL_DIR"]
    np.savez(os.path.join(model_dir, "model.npz"), weights=weights)
    with open(os.path.join(model_dir, "model.json"), "w") as f:
        json.dump({"features": int(x.shape[1]), "loss": loss, "accuracy": accuracy}, f)


if __name__ == "__main__":
    main()
