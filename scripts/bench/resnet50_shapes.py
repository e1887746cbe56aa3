"""Element counts of ResNet-50's 161 parameter tensors (torchvision's layout), in registration order.
Printed one per line when run."""


def resnet50_param_counts():
    counts = [64 * 3 * 7 * 7, 64, 64]  # conv1, bn1 weight/bias
    inplanes = 64
    for planes, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            width, out = planes, planes * 4
            counts += [width * inplanes, width, width]          # conv1 1x1, bn1
            counts += [width * width * 9, width, width]         # conv2 3x3, bn2
            counts += [out * width, out, out]                   # conv3 1x1, bn3
            if b == 0:
                counts += [out * inplanes, out, out]            # downsample conv, bn
            inplanes = out
    counts += [1000 * 2048, 1000]                               # fc
    return counts


if __name__ == "__main__":
    c = resnet50_param_counts()
    assert len(c) == 161 and abs(sum(c) - 25_557_032) == 0, (len(c), sum(c))
    print("\n".join(map(str, c)))
