"""LoRA fine-tuning (Hu et al. 2022) of trained ViTs through the PEFT library.

:mod:`vitattn.lora.adapters` builds, counts and merges the adapters; :mod:`vitattn.lora.module`
holds the LightningModule that ``vitattn-finetune`` trains.
"""
