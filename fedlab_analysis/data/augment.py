"""Batched image augmentation on the tensor's device: the FL-Simulator ``Dataset.__getitem__`` recipe
(horizontal flip with p = .5, then with p = crop_p a random crop of the image zero-padded by ``crop``),
drawn per sample from one ``torch.Generator`` and applied with one gather, no loop over samples.
The padding is zero in normalised space, as the simulator pads after normalising."""
import torch

from fedlab_analysis.errors import UserError


def augment(x: torch.Tensor, gen: torch.Generator, flip: bool = True, crop: int = 4,
            crop_p: float = 0.5) -> torch.Tensor:
    """Augment a batch of images x [B, C, H, W]; returns a new tensor of the same shape.

    Sample b is mirrored left-right with probability 1/2 (if ``flip``) and, with probability ``crop_p``
    (0.5 in the simulator, 1.0 for torchvision's ``RandomCrop(padding=crop)``), shifted by offsets
    (dy, dx) uniform in {0, ..., 2 crop} into the zero-padded image: out[b, :, i, j] = pad(x)[b, :, i + dy, j + dx].
    Random numbers are drawn on ``gen``'s device in a fixed order (flip, crop, dy, dx), so the same
    generator state gives the same output on any device.
    """
    if x.dim() != 4:
        raise UserError(f"augment: expects images [B, C, H, W], got shape {tuple(x.shape)}; "
                        "flip/crop augmentation is for image data sets only")
    if crop < 0 or not 0.0 <= crop_p <= 1.0:
        raise UserError(f"augment: need crop >= 0 and 0 <= crop_p <= 1, got crop={crop}, crop_p={crop_p}")
    return aug_apply(x, aug_draw(len(x), gen, flip, crop, crop_p), crop)


def aug_draw(B: int, gen: torch.Generator, flip: bool = True, crop: int = 4, crop_p: float = 0.5) -> torch.Tensor:
    """The random numbers of ``augment`` for B samples, as one long tensor [3, B] (mirror 0/1, dy, dx), drawn
    on ``gen``'s device in a fixed order (flip, crop, dy, dx). Draw once, apply to any batching of the samples."""
    g = gen.device
    mirror = torch.rand(B, generator=gen, device=g) < 0.5
    shift = torch.rand(B, generator=gen, device=g) < crop_p
    dy, dx = torch.randint(0, 2 * crop + 1, (2, B), generator=gen, device=g)
    if not flip:
        mirror = torch.zeros_like(mirror)
    dy, dx = torch.where(shift, dy, crop), torch.where(shift, dx, crop)  # no crop = the centred window
    return torch.stack([mirror.long(), dy, dx])


def aug_apply(x: torch.Tensor, draws: torch.Tensor, crop: int = 4) -> torch.Tensor:
    """Apply drawn flips and crops ``draws`` [3, B] (``aug_draw``) to images x [B, C, H, W] with one gather."""
    B, _, H, W = x.shape
    draws = draws.to(x.device)
    mirror, dy, dx = draws[0].bool(), draws[1], draws[2]
    # source pixel of out[b, :, i, j] in x: row i + dy - crop, column j + dx - crop, mirrored if flipped
    rows = torch.arange(H, device=x.device) + dy[:, None] - crop  # [B, H]
    cols = torch.arange(W, device=x.device) + dx[:, None] - crop  # [B, W]
    cols = torch.where(mirror[:, None], W - 1 - cols, cols)
    inside = ((rows >= 0) & (rows < H))[:, :, None] & ((cols >= 0) & (cols < W))[:, None, :]  # [B, H, W]
    b = torch.arange(B, device=x.device)[:, None, None]
    out = x[b, :, rows.clamp(0, H - 1)[:, :, None], cols.clamp(0, W - 1)[:, None, :]]  # [B, H, W, C]
    out = torch.where(inside[..., None], out, torch.zeros((), dtype=x.dtype, device=x.device))
    return out.permute(0, 3, 1, 2)                  # [B, C, H, W] in channels-last memory order
