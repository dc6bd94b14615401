"""The Vision Transformer (plain ``nn.Module``) and its LightningModule."""
