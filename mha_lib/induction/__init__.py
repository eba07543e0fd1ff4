"""Chapter 11: attention heads that learn, on the CPU, in a tiny attention-only transformer.

    model.py        the repeated-segment task, the model, training, previous-token and induction scores,
                    generation, and the three shipped runs (``load_run``)
    checkpoints/    those runs (inside the wheel), written by ``tests/train_induction.py`` (``make checkpoints``)
    plots.py        the chapter's figures;  trainer.py  the live trainer widget

Nothing is imported here: ``from mha_lib.induction import model`` (the notebooks call it ``induction``).
"""
