"""transformers' encoder-decoder (T5), vision (ViT) and speech (Whisper) models as your own
workloads: the models `--config` refuses (it feeds one sequence of token ids) given the inputs
they take (python/tests/test_own_model.py, docs/own-model.md)."""

import torch
import transformers as T

import memscope


def t5(batch=4, seq=128):
    cfg = T.T5Config(vocab_size=4096, d_model=256, d_kv=32, d_ff=1024, num_layers=4,
                     num_heads=8, dropout_rate=0.0, decoder_start_token_id=0,
                     pad_token_id=0)
    model = T.T5ForConditionalGeneration(cfg)
    return memscope.Workload(model=model, inputs=lambda: {
        "input_ids": torch.randint(0, 4096, (batch, seq)),
        "labels": torch.randint(0, 4096, (batch, seq // 2))})


def vit(batch=16):
    cfg = T.ViTConfig(image_size=64, patch_size=8, hidden_size=192, num_hidden_layers=4,
                      num_attention_heads=3, intermediate_size=768, num_labels=10,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = T.ViTForImageClassification(cfg)
    return memscope.Workload(model=model, inputs=lambda: {
        "pixel_values": torch.randn(batch, 3, 64, 64), "labels": torch.randint(0, 10, (batch,))})


def whisper(batch=2):
    cfg = T.WhisperConfig(vocab_size=4096, num_mel_bins=80, d_model=128, encoder_layers=2,
                          decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                          encoder_ffn_dim=512, decoder_ffn_dim=512, max_source_positions=1500,
                          max_target_positions=128, pad_token_id=0, decoder_start_token_id=1, bos_token_id=1,
                          eos_token_id=2,
                          dropout=0.0)
    model = T.WhisperForConditionalGeneration(cfg)
    return memscope.Workload(model=model, inputs=lambda: {
        "input_features": torch.randn(batch, 80, 3000),
        "labels": torch.randint(0, 4096, (batch, 64))})
