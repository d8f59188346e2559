"""A tiny Hugging Face Trainer run: a two-layer BERT built from a config in code, trained for a few
steps on a synthetic classification set on CPU. Nothing is downloaded.

The script says nothing about progress: Transformers registers its Kubeflow callback by itself
when KUBEFLOW_TRAINER_SERVER_URL is set, and the callback reports the run's progress, time left
and logged metrics to the job's status.
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

VOCABULARY = 100
SEQUENCE = 16


class Synthetic(Dataset[dict[str, torch.Tensor]]):
    """Random token sequences, labelled by whether their first token is in the vocabulary's
    upper half: something a small model can learn in a few steps."""

    def __init__(self, size: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(0, VOCABULARY, (size, SEQUENCE), generator=generator)
        self.labels = (self.tokens[:, 0] >= VOCABULARY // 2).long()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.tokens[index], "labels": self.labels[index]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max_steps", type=int, default=30)
    parser.add_argument("--output_dir", default=None, help="default: a temporary directory")
    args = parser.parse_args()
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=VOCABULARY,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=SEQUENCE,
        num_labels=2,
    )
    with tempfile.TemporaryDirectory() as scratch:
        training = TrainingArguments(
            output_dir=args.output_dir or scratch,
            max_steps=args.max_steps,
            per_device_train_batch_size=8,
            learning_rate=1e-3,
            logging_steps=5,
            report_to="none",
            save_strategy="no",
            use_cpu=True,
            disable_tqdm=True,
        )
        trainer = Trainer(
            model=BertForSequenceClassification(config),
            args=training,
            train_dataset=Synthetic(512, seed=0),
        )
        result = trainer.train()
    print(f"trained {result.global_step} steps, train_loss {result.training_loss:.4f}", flush=True)


if __name__ == "__main__":
    main()
